// OptionMap: the typed reads of a registered model's or dataset's free-form options. A value is
// decoded by the same code as a schema key (core/yaml_util.cpp), so `model.options.depth: four`
// fails with the message `model.depth: four` would.
#include <yaml-cpp/yaml.h>

#include <fmt/ranges.h>

#include "core/config.h"
#include "core/config_schema.h"
#include "core/error.h"
#include "core/yaml_util.h"

namespace brrr {
namespace {

detail::Where where_of(const OptionMap::Value& v) {
  detail::Where w;
  w.file = v.file;
  w.line = v.line;
  w.column = v.column;
  w.assignment = v.assignment;
  return w;
}

// Decodes `value` (as YAML text) into a T, with the messages and rules of a schema field.
template <typename T>
T decode(const OptionMap::Value& value, const std::string& key) {
  T out{};
  detail::Field field{key, detail::Kind::kInt, nullptr, detail::Rules(), ""};
  if constexpr (std::is_same_v<T, int64_t>) field.kind = detail::Kind::kInt;
  if constexpr (std::is_same_v<T, double>) field.kind = detail::Kind::kDouble;
  if constexpr (std::is_same_v<T, bool>) field.kind = detail::Kind::kBool;
  if constexpr (std::is_same_v<T, std::string>) field.kind = detail::Kind::kString;
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) field.kind = detail::Kind::kIntList;
  if constexpr (std::is_same_v<T, std::vector<double>>) field.kind = detail::Kind::kDoubleList;
  detail::decode_value(field, &out, YAML::Load(value.yaml), key, where_of(value));
  return out;
}

}  // namespace

std::vector<std::string> OptionMap::names() const {
  std::vector<std::string> out;
  for (const auto& entry : values_) out.push_back(entry.first);
  return out;
}

const OptionMap::Value* OptionMap::find(const std::string& name) const {
  read_.insert(name);
  const auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

// One required and one defaulted read per kind; `Fallback` is how the header passes the default
// (by value for scalars, by const reference otherwise).
#define BRRR_OPTION_GETTERS(T, Fallback, getter)                                   \
  T OptionMap::getter(const std::string& name) const {                             \
    const Value* v = find(name);                                                   \
    if (v == nullptr) {                                                            \
      throw ConfigError(fmt::format("{}.{} is required but not set", key_, name)); \
    }                                                                              \
    return decode<T>(*v, key_ + "." + name);                                       \
  }                                                                                \
  T OptionMap::getter(const std::string& name, Fallback fallback) const {          \
    const Value* v = find(name);                                                   \
    return v == nullptr ? fallback : decode<T>(*v, key_ + "." + name);             \
  }

BRRR_OPTION_GETTERS(int64_t, int64_t, get_int)
BRRR_OPTION_GETTERS(double, double, get_double)
BRRR_OPTION_GETTERS(bool, bool, get_bool)
BRRR_OPTION_GETTERS(std::string, const std::string&, get_string)
BRRR_OPTION_GETTERS(std::vector<int64_t>, const std::vector<int64_t>&, get_int_list)
BRRR_OPTION_GETTERS(std::vector<double>, const std::vector<double>&, get_double_list)

#undef BRRR_OPTION_GETTERS

void OptionMap::check_all_read(const std::string& reader) const {
  std::vector<std::string> read(read_.begin(), read_.end());
  for (const auto& [name, value] : values_) {
    if (read_.count(name) > 0) continue;
    std::string hint;
    if (const std::string near = detail::nearest(name, read); !near.empty()) {
      hint = fmt::format("; did you mean '{}'?", near);
    } else if (read.empty()) {
      hint = " (it reads no options)";
    } else {
      hint = fmt::format(" (it reads: {})", fmt::join(read, ", "));
    }
    throw ConfigError(where_of(value).message(
        key_ + "." + name, fmt::format("is not an option of {}{}", reader, hint)));
  }
}

bool OptionMap::operator==(const OptionMap& other) const {
  if (values_.size() != other.values_.size()) return false;
  for (const auto& [name, value] : values_) {
    const auto it = other.values_.find(name);
    if (it == other.values_.end() || it->second.yaml != value.yaml) return false;
  }
  return true;
}

}  // namespace brrr
