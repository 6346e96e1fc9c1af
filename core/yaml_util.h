#pragma once
// Internal helpers of the config loader (core/config*.cpp only): where a value came from, reading
// files, loading YAML with brrr errors, and "did you mean" suggestions.
//
// Invariant: every ConfigError message of the config code is built by Where::message() or
// Where::unknown_key(), so all of them share one format:
//   "<key> at <file>:<line>:<column>: <what is wrong>"        (values from files; 1-based)
//   "--set <assignment>: <key>: <what is wrong>"               (command-line overrides)
//   "<key>: <what is wrong>"                                   (values set in code)
#include <string>
#include <vector>

#include "core/config_schema.h"

namespace YAML {
class Node;
struct Mark;
}  // namespace YAML

namespace brrr::detail {

/// The source of one config value: a position in a file, one `--set` assignment, or nothing
/// (a default or a value set in code).
struct Where {
  /// File name as shown to the user ("" for overrides and code).
  std::string file;
  /// 1-based position in `file`; 0 when unknown.
  int line = 0;
  int column = 0;
  /// The "a.b=value" text of a `--set`; "" otherwise.
  std::string assignment;

  static Where in_file(const std::string& file, const YAML::Mark& mark);
  static Where in_override(const std::string& assignment);
  /// The same source at another node's position (a no-op for overrides and code).
  Where at(const YAML::Mark& mark) const;
  /// "exp.yaml:4:14", "exp.yaml" (no position), "--set a=b", or "" (code).
  std::string position() const;
  /// A complete error message about `key` (formats above).
  std::string message(const std::string& key, const std::string& what) const;
  /// "unknown key '<key>' at <position><tail>" (or the override form); tail is e.g.
  /// "; did you mean 'train.max_steps'?".
  std::string unknown_key(const std::string& key, const std::string& tail) const;
};

/// The whole file as text. Throws ConfigError "cannot read <what> '<path>': <errno text>".
std::string read_text_file(const std::string& path, const std::string& what);

/// Parses one YAML document; a syntax error becomes ConfigError "<label>:<line>:<col>: YAML
/// syntax error: <yaml-cpp's message>". Empty text gives a null node.
YAML::Node parse_yaml(const std::string& text, const std::string& label);

/// A node for messages: "'ten'" for scalars, "a sequence", "a mapping", "nothing (null)".
std::string describe_node(const YAML::Node& node);

/// Edit distance: insertions, deletions, substitutions and swaps of adjacent characters each
/// cost 1.
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `word` when it is close enough to be a plausible typo, else "".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

/// "; did you mean '<parent>.<closest>'?" when one of `names` (the keys valid under `parent`) is
/// close to `name`, else " (valid keys in '<parent>': a, b, ...)".
std::string unknown_key_hint(const std::string& parent, const std::string& name,
                             const std::vector<std::string>& names);

/// A double as YAML text that reads back to the same value (".inf", ".nan", "1.0", "3e-08").
std::string format_double(double v);

/// Reads `node` into the field at `target` (type checks, `auto`, list elements, transform maps),
/// then checks the field's rules. Errors name `key` and `where` (already positioned at `node`).
void decode_value(const Field& field, void* target, const YAML::Node& node, const std::string& key,
                  const Where& where);

/// The value as YAML text that decode_value reads back to the same value. Strings are always
/// double-quoted; a non-empty transform list is a block sequence, each line starting "\n<indent>-
/// ".
std::string format_value(const Field& field, const void* value, const std::string& indent);

}  // namespace brrr::detail
