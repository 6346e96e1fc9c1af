#pragma once
// Reading JSON Lines files of flat records (metrics.jsonl, gpu.jsonl): one JSON object per line,
// values numbers, strings, booleans, or nested objects/arrays of those. The parsing is yaml-cpp's
// (JSON is YAML 1.2 flow syntax), so YAML and JSON are both parsed only in core/.
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace brrr {

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
