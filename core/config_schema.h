#pragma once
// The schema of ExperimentConfig: one descriptor per key (path, kind, accessor, rules, doc).
// Parsing, `--set`, validation, printing, equality and config_keys() all walk these tables;
// nothing else in brrr lists the config fields.
//
// Invariant: a key path in config_fields() is also the C++ member path under ExperimentConfig
// ("data.val.batch_size" is `config.data.val.batch_size`), and the table lists the keys of a
// section contiguously in the order to_yaml prints them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"

namespace brrr::detail {

struct Where;

/// The C++ type of a field.
enum class Kind { kInt, kDouble, kBool, kString, kIntList, kDoubleList, kTransforms, kOptions };

/// "an integer", "a number", ... (for "expected ..." messages).
const char* kind_description(Kind kind);

/// Value rules of one key, chainable like libtorch options: `Rules().ge(1)`. Bounds apply to a
/// number or to every element of a list.
struct Rules {
  std::optional<double> lo, hi;
  bool lo_open = false, hi_open = false;
  /// Allowed values of a string.
  std::vector<std::string> choices;
  /// The integer that the YAML scalar `auto` stands for.
  std::optional<int64_t> auto_value;
  /// Must be set to a non-empty string (checked by validate, after bases and overrides).
  bool required = false;
  /// A string that may not be "" when given.
  bool non_empty = false;
  /// `auto`, `cpu`, `cuda` or `cuda:N`.
  bool device = false;
  /// A single number is accepted as a one-element list (`size: 224`).
  bool scalar_as_list = false;
  /// data.val.<k> only: takes data.<k> when the files and overrides leave it unset.
  bool inherits = false;

  Rules ge(double v) const {
    return with([v](Rules& r) { r.lo = v, r.lo_open = false; });
  }
  Rules gt(double v) const {
    return with([v](Rules& r) { r.lo = v, r.lo_open = true; });
  }
  Rules le(double v) const {
    return with([v](Rules& r) { r.hi = v, r.hi_open = false; });
  }
  Rules lt(double v) const {
    return with([v](Rules& r) { r.hi = v, r.hi_open = true; });
  }
  Rules one_of(std::vector<std::string> v) const {
    return with([&v](Rules& r) { r.choices = v; });
  }
  Rules auto_means(int64_t v) const {
    return with([v](Rules& r) { r.auto_value = v; });
  }
  Rules must_be_set() const {
    return with([](Rules& r) { r.required = true; });
  }
  Rules not_empty() const {
    return with([](Rules& r) { r.non_empty = true; });
  }
  Rules device_name() const {
    return with([](Rules& r) { r.device = true; });
  }
  Rules allow_scalar() const {
    return with([](Rules& r) { r.scalar_as_list = true; });
  }
  Rules inherit() const {
    return with([](Rules& r) { r.inherits = true; });
  }

 private:
  template <typename Edit>
  Rules with(Edit edit) const {
    Rules r = *this;
    edit(r);
    return r;
  }
};

/// One key of a schema table.
struct Field {
  /// "train.max_steps" (config table) or "size" (transform table).
  std::string key;
  Kind kind;
  /// The field inside a root object (ExperimentConfig* or TransformOptions*, per table).
  void* (*get)(void* root);
  Rules rules;
  const char* doc;

  void* in(ExperimentConfig& c) const { return get(&c); }
  const void* in(const ExperimentConfig& c) const { return get(const_cast<ExperimentConfig*>(&c)); }
  void* in(TransformOptions& t) const { return get(&t); }
  const void* in(const TransformOptions& t) const { return get(const_cast<TransformOptions*>(&t)); }
};

/// Every key of ExperimentConfig, in print order.
const std::vector<Field>& config_fields();
/// The keys of one element of a transform list, in print order.
const std::vector<Field>& transform_fields();
/// The field named `key`, or nullptr.
const Field* find_field(const std::vector<Field>& fields, const std::string& key);
/// True for section paths of config_fields(): "run", "data", "data.val", "train.fp16", ...
bool is_section(const std::string& path);
/// The last segments of the keys and sections directly under `section` ("" = the top level).
std::vector<std::string> child_names(const std::string& section);

/// Checks the field's Rules (except `required`, which validate() checks with the file in view) on
/// the value at `value`; errors name `key` and `where`.
void check_value(const Field& field, const void* value, const std::string& key, const Where& where);
bool values_equal(const Field& field, const void* a, const void* b);
void copy_value(const Field& field, void* dst, const void* src);
/// A short type name for docs: "int", "float", "bool", "string", "[int]", "[float]", "[transform]",
/// "map".
const char* kind_name(Kind kind);

}  // namespace brrr::detail
