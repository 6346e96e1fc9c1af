#pragma once
// JSON in brrr: the one writer (JsonValue/JsonObject, a small ordered builder) and the one reader
// of JSON Lines files of flat records (metrics.jsonl, gpu.jsonl): one JSON object per line,
// values numbers, strings, booleans, or nested objects/arrays of those. The parsing is yaml-cpp's
// (JSON is YAML 1.2 flow syntax), so YAML and JSON are both parsed only in core/.
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

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

/// One line of a JSON Lines file. Nested keys are joined with '/':
/// {"breakdown_ms": {"forward": 3}} gives numbers["breakdown_ms/forward"] = 3; array elements use
/// their index ("sizes/0"). Booleans are numbers 1 and 0; NaN, Infinity and -Infinity (as Python's
/// json module writes them) are numbers; null values are left out.
struct JsonRecord {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
};

/// Every non-blank line of `path` as a record, in file order. Throws DataError naming
/// `path:line` for a malformed line (not JSON, not an object) and the path for an unreadable file.
std::vector<JsonRecord> read_json_lines(const std::string& path);

/// Parses one line (as read_json_lines does); errors name `where` (e.g. "metrics.jsonl:12").
JsonRecord parse_json_record(std::string_view line, const std::string& where);

/// `text` as the inside of a JSON string literal (without the quotes): escapes '"', '\\' and
/// control characters; UTF-8 passes through unchanged.
std::string json_escape(std::string_view text);

}  // namespace brrr
