#include "core/json_lines.h"

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
      stack_.push_back({true, ""});
      return;
    }
    if (expecting_key()) fail(mark, "an object key must be a string");
    stack_.push_back({is_map, name(mark) + "/"});
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

}  // namespace brrr
