#pragma once
// JSON Lines metrics (`runs/<name>/metrics.jsonl`): one JSON object per line, keys in insertion
// order. JsonValue/JsonObject are a deliberately small builder (no parser): brrr only writes JSON.
//
// Invariant: each line is written with a single write and flushed, so a reader (or a crash) sees
// only whole lines, except possibly a truncated last one. The file is opened for append, so a
// resumed run continues it.
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "trainer/metric_writer.h"

namespace brrr {

class JsonValue;

/// An ordered JSON object. set() on an existing key replaces the value in place (order kept).
class JsonObject {
 public:
  JsonObject();
  JsonObject(std::initializer_list<std::pair<std::string, JsonValue>> items);
  JsonObject(const JsonObject&);
  JsonObject(JsonObject&&) noexcept;
  JsonObject& operator=(const JsonObject&);
  JsonObject& operator=(JsonObject&&) noexcept;
  ~JsonObject();

  /// Adds or replaces `key`; returns *this for chaining.
  JsonObject& set(const std::string& key, JsonValue value);
  /// The value of `key`, or nullptr.
  const JsonValue* find(const std::string& key) const;
  size_t size() const;
  bool empty() const;
  /// Key-value pairs in insertion order.
  const std::vector<std::pair<std::string, JsonValue>>& items() const;
  /// Compact JSON text, e.g. {"kind": "train", "step": 100}. See JsonValue::dump.
  std::string dump() const;

 private:
  std::vector<std::pair<std::string, JsonValue>> items_;
};

/// null, bool, integer, double, string, array or object.
class JsonValue {
 public:
  using Array = std::vector<JsonValue>;

  JsonValue() = default;  // null
  JsonValue(std::nullptr_t) {}
  JsonValue(bool v) : value_(v) {}
  /// Any integer type except bool (int, int64_t, size_t, ...). Values above INT64_MAX are stored
  /// as double.
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  JsonValue(T v) : value_(from_integer(v)) {}
  JsonValue(double v) : value_(v) {}
  JsonValue(float v) : value_(static_cast<double>(v)) {}
  JsonValue(const char* v) : value_(std::string(v)) {}
  JsonValue(std::string v) : value_(std::move(v)) {}
  JsonValue(JsonObject v) : value_(std::move(v)) {}
  JsonValue(Array v) : value_(std::move(v)) {}

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  /// The stored alternative; throws std::bad_variant_access on the wrong type.
  bool as_bool() const { return std::get<bool>(value_); }
  int64_t as_int() const { return std::get<int64_t>(value_); }
  /// Numbers (integer or double) as double.
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(value_); }
  const JsonObject& as_object() const { return std::get<JsonObject>(value_); }
  const Array& as_array() const { return std::get<Array>(value_); }

  /// Compact JSON text. Doubles use the shortest text that round-trips and always look like
  /// floats ("1.0", "1e-05"); non-finite doubles are written NaN / Infinity / -Infinity, which
  /// Python's json module (and pandas) read. Strings are escaped; UTF-8 passes through.
  std::string dump() const;
  void dump_to(std::string& out) const;

 private:
  using Storage =
      std::variant<std::monostate, bool, int64_t, double, std::string, JsonObject, Array>;

  template <typename T>
  static Storage from_integer(T v) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (v > static_cast<T>(INT64_MAX)) return static_cast<double>(v);
    }
    return static_cast<int64_t>(v);
  }

  Storage value_;
};

/// Appends JSON objects to a file, one per line, flushed line by line. Thread-safe.
class JsonlWriter : public MetricWriter {
 public:
  /// Opens `path` for append, creating its parent directories. Throws brrr::Error naming the path.
  explicit JsonlWriter(const std::string& path);
  ~JsonlWriter() override;
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  /// Writes `object` as one line and flushes it. Throws brrr::Error naming the path on failure.
  void write(const JsonObject& object);
  /// Writes {"kind": prefix, "step": step, <name>: <value>...} (scalars in name order).
  void add_scalars(int64_t step, const std::map<std::string, double>& scalars,
                   const std::string& prefix) override;
  void flush() override;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::mutex mutex_;
};

}  // namespace brrr
