#include "core/json_lines.h"

#include <fmt/format.h>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace brrr {
namespace {

// Builds one record from yaml-cpp's parse events (no YAML::Node graph: that is several times
// slower, and metrics files reach 100k lines). Nested names are joined with '/'.
class RecordBuilder : public YAML::EventHandler {
 public:
  RecordBuilder(JsonRecord& out, const std::string& where) : out_(out), where_(where) {}

  bool complete() const { return root_closed_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    if (expecting_key()) fail(mark, "an object key must be a string");
    name(mark);  // a null value is left out of the record
    advance();
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { fail(mark, "not JSON (alias)"); }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                const std::string& value) override;
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    open(mark, false);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    open(mark, true);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    bool is_map;
    std::string prefix;  // "" for the root, "parent/" below it
    bool want_key = true;
    std::string key;
    size_t index = 0;
  };

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& what) const {
    throw DataError(
        fmt::format("{}: malformed JSON record at column {}: {}", where_, mark.column + 1, what));
  }
  bool expecting_key() const {
    return !stack_.empty() && stack_.back().is_map && stack_.back().want_key;
  }
  // The flattened name of the value now being read.
  std::string name(const YAML::Mark& mark) const {
    if (stack_.empty()) fail(mark, "expected an object {...}");
    const Frame& f = stack_.back();
    return f.prefix + (f.is_map ? f.key : std::to_string(f.index));
  }
  void advance() {
    Frame& f = stack_.back();
    if (f.is_map) {
      f.want_key = true;
    } else {
      ++f.index;
    }
  }
  void open(const YAML::Mark& mark, bool is_map) {
    if (stack_.empty()) {
      if (root_closed_ || !is_map) fail(mark, "expected one object {...} per line");
      stack_.push_back(Frame{true, "", true, "", 0});
      return;
    }
    if (expecting_key()) fail(mark, "an object key must be a string");
    stack_.push_back(Frame{is_map, name(mark) + "/", true, "", 0});
  }
  void close() {
    stack_.pop_back();
    if (stack_.empty()) {
      root_closed_ = true;
    } else {
      advance();
    }
  }

  JsonRecord& out_;
  const std::string& where_;
  std::vector<Frame> stack_;
  bool root_closed_ = false;
};

void RecordBuilder::OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                             const std::string& value) {
  if (expecting_key()) {
    stack_.back().key = value;
    stack_.back().want_key = false;
    return;
  }
  const std::string key = name(mark);
  if (tag != "?") {  // quoted: a string, even "3"
    out_.strings[key] = value;
  } else if (value == "true" || value == "false") {
    out_.numbers[key] = value == "true" ? 1.0 : 0.0;
  } else if (value == "NaN") {
    out_.numbers[key] = std::numeric_limits<double>::quiet_NaN();
  } else if (value == "Infinity" || value == "-Infinity") {
    out_.numbers[key] = (value[0] == '-' ? -1 : 1) * std::numeric_limits<double>::infinity();
  } else {
    double v = 0;
    const char* end = value.data() + value.size();
    const auto [ptr, ec] = std::from_chars(value.data(), end, v);
    if (value.empty() || ec != std::errc() || ptr != end || !std::isfinite(v)) {
      fail(mark, fmt::format("value '{}' of key '{}' is not a JSON number, string or boolean",
                             value, key));
    }
    out_.numbers[key] = v;
  }
  advance();
}

bool is_hex4(std::string_view s, size_t at, unsigned& value) {
  if (at + 4 > s.size()) return false;
  const auto [ptr, ec] = std::from_chars(s.data() + at, s.data() + at + 4, value, 16);
  return ec == std::errc() && ptr == s.data() + at + 4;
}

// JSON writes a character outside the BMP as a UTF-16 surrogate pair ("\ud83d\ude00", Python's
// default); YAML rejects surrogate escapes, so each pair becomes YAML's "\UXXXXXXXX".
std::string merge_surrogate_pairs(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size();) {
    unsigned hi = 0, lo = 0;
    if (line[i] != '\\' || i + 1 >= line.size()) {
      out += line[i++];
    } else if (line[i + 1] == 'u' && is_hex4(line, i + 2, hi) && hi >= 0xD800 && hi < 0xDC00 &&
               line.substr(i + 6, 2) == "\\u" && is_hex4(line, i + 8, lo) && lo >= 0xDC00 &&
               lo < 0xE000) {
      out += fmt::format("\\U{:08X}", 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
      i += 12;
    } else {
      out.append(line.substr(i, 2));  // any other escape, including "\\", stays as it is
      i += 2;
    }
  }
  return out;
}

}  // namespace

JsonRecord parse_json_record(std::string_view line, const std::string& where) {
  JsonRecord record;
  std::istringstream in(line.find("\\u") == std::string_view::npos ? std::string(line)
                                                                   : merge_surrogate_pairs(line));
  RecordBuilder builder(record, where);
  try {
    YAML::Parser parser(in);
    parser.HandleNextDocument(builder);
  } catch (const YAML::Exception& e) {
    throw DataError(
        fmt::format("{}: malformed JSON record at column {}: {}", where, e.mark.column + 1, e.msg));
  }
  if (!builder.complete()) {
    throw DataError(fmt::format("{}: malformed JSON record: expected an object {{...}}", where));
  }
  return record;
}

std::vector<JsonRecord> read_json_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  struct Line {
    std::string_view text;
    size_t number;  // 1-based
  };
  std::vector<Line> lines;
  size_t number = 1;
  for (size_t start = 0; start < text.size(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) lines.push_back({line, number});
    start = end + 1;
  }

  // Lines are independent: parse contiguous chunks on a few threads. The first failing chunk
  // holds the first malformed line, so errors are the same as a sequential read's.
  std::vector<JsonRecord> records(lines.size());
  constexpr size_t kLinesPerThread = 4096;
  const size_t threads = std::clamp<size_t>(lines.size() / kLinesPerThread, 1,
                                            std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::exception_ptr> errors(threads);
  auto parse_chunk = [&](size_t chunk) {
    const size_t begin = lines.size() * chunk / threads;
    const size_t end = lines.size() * (chunk + 1) / threads;
    try {
      for (size_t i = begin; i < end; ++i) {
        records[i] = parse_json_record(lines[i].text, fmt::format("{}:{}", path, lines[i].number));
      }
    } catch (...) {
      errors[chunk] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (size_t chunk = 1; chunk < threads; ++chunk) pool.emplace_back(parse_chunk, chunk);
  parse_chunk(0);
  for (auto& t : pool) t.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return records;
}

std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

// ---- writing ---------------------------------------------------------------------------------

namespace {

// The writer escapes with json_escape, the reader's own rule: one writer, one reader.
void dump_string(std::string& out, const std::string& s) {
  out.push_back('"');
  out += json_escape(s);
  out.push_back('"');
}

void dump_double(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "Infinity" : "-Infinity";
  } else {
    // fmt's "{}" is the shortest text that parses back to the same double ("0.1", "1e-05",
    // "100"); append ".0" to integral-looking values so readers keep them as floats.
    const size_t start = out.size();
    fmt::format_to(std::back_inserter(out), "{}", v);
    if (out.find_first_of(".eE", start) == std::string::npos) out += ".0";
  }
}

}  // namespace

// ---- JsonObject -------------------------------------------------------------------------------

JsonObject::JsonObject() = default;
JsonObject::JsonObject(std::initializer_list<std::pair<std::string, JsonValue>> items) {
  for (const auto& [key, value] : items) set(key, value);
}
JsonObject::JsonObject(const JsonObject&) = default;
JsonObject::JsonObject(JsonObject&&) noexcept = default;
JsonObject& JsonObject::operator=(const JsonObject&) = default;
JsonObject& JsonObject::operator=(JsonObject&&) noexcept = default;
JsonObject::~JsonObject() = default;

JsonObject& JsonObject::set(const std::string& key, JsonValue value) {
  for (auto& item : items_) {
    if (item.first == key) {
      item.second = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(key, std::move(value));
  return *this;
}

const JsonValue* JsonObject::find(const std::string& key) const {
  for (const auto& item : items_) {
    if (item.first == key) return &item.second;
  }
  return nullptr;
}

size_t JsonObject::size() const {
  return items_.size();
}
bool JsonObject::empty() const {
  return items_.empty();
}
const std::vector<std::pair<std::string, JsonValue>>& JsonObject::items() const {
  return items_;
}

std::string JsonObject::dump() const {
  return JsonValue(*this).dump();
}

// ---- JsonValue --------------------------------------------------------------------------------

double JsonValue::as_double() const {
  if (const auto* i = std::get_if<int64_t>(&value_)) return static_cast<double>(*i);
  return std::get<double>(value_);
}

std::string JsonValue::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

void JsonValue::dump_to(std::string& out) const {
  if (std::holds_alternative<std::monostate>(value_)) {
    out += "null";
  } else if (const auto* b = std::get_if<bool>(&value_)) {
    out += *b ? "true" : "false";
  } else if (const auto* i = std::get_if<int64_t>(&value_)) {
    fmt::format_to(std::back_inserter(out), "{}", *i);
  } else if (const auto* d = std::get_if<double>(&value_)) {
    dump_double(out, *d);
  } else if (const auto* s = std::get_if<std::string>(&value_)) {
    dump_string(out, *s);
  } else if (const auto* o = std::get_if<JsonObject>(&value_)) {
    out.push_back('{');
    bool first = true;
    for (const auto& [key, value] : o->items()) {
      if (!first) out += ", ";
      first = false;
      dump_string(out, key);
      out += ": ";
      value.dump_to(out);
    }
    out.push_back('}');
  } else {
    out.push_back('[');
    bool first = true;
    for (const auto& value : std::get<Array>(value_)) {
      if (!first) out += ", ";
      first = false;
      value.dump_to(out);
    }
    out.push_back(']');
  }
}

}  // namespace brrr
