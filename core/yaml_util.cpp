#include "core/yaml_util.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_lines.h"

namespace brrr::detail {

Where Where::in_file(const std::string& file, const YAML::Mark& mark) {
  Where w;
  w.file = file;
  return w.at(mark);
}

Where Where::in_override(const std::string& assignment) {
  Where w;
  w.assignment = assignment;
  return w;
}

Where Where::at(const YAML::Mark& mark) const {
  Where w = *this;
  // yaml-cpp marks are 0-based; a null mark (-1) means the node has no position of its own.
  if (!file.empty() && !mark.is_null()) {
    w.line = mark.line + 1;
    w.column = mark.column + 1;
  }
  return w;
}

std::string Where::position() const {
  if (!assignment.empty()) return "--set " + assignment;
  if (file.empty()) return "";
  if (line <= 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
}

std::string Where::message(const std::string& key, const std::string& what) const {
  if (!assignment.empty()) return fmt::format("--set {}: {}: {}", assignment, key, what);
  if (!file.empty()) return fmt::format("{} at {}: {}", key, position(), what);
  return fmt::format("{}: {}", key, what);
}

std::string Where::unknown_key(const std::string& key, const std::string& tail) const {
  if (!assignment.empty())
    return fmt::format("--set {}: unknown key '{}'{}", assignment, key, tail);
  if (!file.empty()) return fmt::format("unknown key '{}' at {}{}", key, position(), tail);
  return fmt::format("unknown key '{}'{}", key, tail);
}

std::string read_text_file(const std::string& path, const std::string& what) {
  // A config is a small regular file: a device (/dev/zero), a FIFO or a huge file would hang
  // the reader or eat the memory.
  constexpr std::uintmax_t kMaxBytes = 16u << 20;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status)) {
    throw ConfigError(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(EISDIR)));
  }
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw ConfigError(fmt::format(
        "cannot read {} '{}': not a regular file (a device, FIFO or socket)", what, path));
  }
  if (std::filesystem::exists(status)) {
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxBytes) {
      throw ConfigError(
          fmt::format("cannot read {} '{}': {} bytes is not a config (the limit is {} MiB)", what,
                      path, size, kMaxBytes >> 20));
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno)));
  }
  return text.str();
}

YAML::Node parse_yaml(const std::string& text, const std::string& label) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}:{}: YAML syntax error: {}", label, e.mark.line + 1,
                                  e.mark.column + 1, e.msg));
  }
}

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing (null)";
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: d[i][j] = distance(a[0, i), b[0, j)); swapping two neighbouring
  // characters ("trian" for "train", the most common typo) costs 1, not 2.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& candidate : candidates) {
    const size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // A third of the word's length (at least 1, at most 3 edits) separates typos from other words.
  const size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  return best_distance <= limit ? best : std::string();
}

// --- Typed values ----------------------------------------------------------------------------

namespace {

[[noreturn]] void fail(const Where& where, const std::string& key, const std::string& what) {
  throw ConfigError(where.message(key, what));
}

template <typename T>
std::string format_list(const std::vector<T>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ", ";
    if constexpr (std::is_same_v<T, double>) {
      s += format_double(values[i]);
    } else {
      s += fmt::format("{}", values[i]);
    }
  }
  return s + "]";
}
int64_t decode_int(const Rules& rules, const YAML::Node& node, const std::string& key,
                   const Where& where) {
  if (node.IsScalar()) {
    if (rules.auto_value && node.Scalar() == "auto") return *rules.auto_value;
    int64_t v = 0;
    if (YAML::convert<int64_t>::decode(node, v)) {
      // `auto` is stored as a number; that number written out is not a way to say auto.
      if (rules.auto_value && v == *rules.auto_value) {
        fail(where, key, fmt::format("{} is not a valid value; write auto to have it chosen", v));
      }
      return v;
    }
  }
  fail(where, key,
       fmt::format("expected an integer{}, got {}", rules.auto_value ? " or 'auto'" : "",
                   describe_node(node)));
}

double decode_double(const YAML::Node& node, const std::string& key, const Where& where) {
  double v = 0;
  if (node.IsScalar() && YAML::convert<double>::decode(node, v)) return v;
  fail(where, key, fmt::format("expected a number, got {}", describe_node(node)));
}

// Lists accept a sequence, null (= empty) or, with allow_scalar, one bare value.
template <typename T, typename DecodeOne>
std::vector<T> decode_list(const Field& field, const YAML::Node& node, const std::string& key,
                           const Where& where, DecodeOne decode_one) {
  std::vector<T> out;
  if (node.IsNull()) return out;
  if (node.IsScalar() && field.rules.scalar_as_list) {
    out.push_back(decode_one(node, key, where));
    return out;
  }
  if (!node.IsSequence()) {
    fail(where, key,
         fmt::format("expected {}, got {}", kind_description(field.kind), describe_node(node)));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    out.push_back(decode_one(node[i], fmt::format("{}[{}]", key, i), where.at(node[i].Mark())));
  }
  return out;
}

TransformOptions decode_transform(const YAML::Node& node, const std::string& key,
                                  const Where& where) {
  if (!node.IsMap()) {
    fail(where, key,
         fmt::format("expected a transform mapping such as {{name: horizontal_flip}}, got {}",
                     describe_node(node)));
  }
  TransformOptions t;
  std::set<std::string> seen;
  for (const auto& item : node) {
    const std::string name = item.first.Scalar();
    const std::string child = key + "." + name;
    const Where key_at = where.at(item.first.Mark());
    if (!seen.insert(name).second) throw ConfigError(key_at.message(child, "duplicate key"));
    const Field* f = find_field(transform_fields(), name);
    if (f == nullptr) {
      std::vector<std::string> names;
      for (const auto& tf : transform_fields()) names.push_back(tf.key);
      throw ConfigError(key_at.unknown_key(child, unknown_key_hint(key, name, names)));
    }
    const Where value_at = item.second.IsNull() ? key_at : where.at(item.second.Mark());
    decode_value(*f, f->in(t), item.second, child, value_at);
  }
  return t;
}

// A free-form options map: each value kept as flow YAML with its place. Maps merge key by key,
// as sections do across base files and --set.
void decode_options(OptionMap& map, const YAML::Node& node, const std::string& key,
                    const Where& where) {
  map.set_key(key);
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    fail(where, key,
         fmt::format("expected a mapping of options ({{name: value, ...}}), got {}",
                     describe_node(node)));
  }
  std::set<std::string> seen;
  for (const auto& item : node) {
    const Where key_at = where.at(item.first.Mark());
    const std::string name = item.first.IsScalar() ? item.first.Scalar() : "";
    const bool plain = !name.empty() && name.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_") == std::string::npos;
    if (!plain) fail(key_at, key, "option names must be plain names (letters, digits, _)");
    const std::string child = key + "." + name;
    if (!seen.insert(name).second) throw ConfigError(key_at.message(child, "duplicate key"));
    const Where value_at = item.second.IsNull() ? key_at : where.at(item.second.Mark());
    YAML::Emitter out;
    out.SetMapFormat(YAML::Flow);
    out.SetSeqFormat(YAML::Flow);
    out << item.second;
    OptionMap::Value value;
    value.yaml = item.second.IsNull() ? "null" : out.c_str();
    value.file = value_at.file;
    value.line = value_at.line;
    value.column = value_at.column;
    value.assignment = value_at.assignment;
    map.set(name, std::move(value));
  }
}

}  // namespace

std::string format_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  // fmt's `{}` is the shortest text that reads back to the same double.
  std::string s = fmt::format("{}", v);
  if (s.find_first_not_of("-0123456789") == std::string::npos) s += ".0";  // keep it a float
  return s;
}

std::string unknown_key_hint(const std::string& parent, const std::string& name,
                             const std::vector<std::string>& names) {
  const std::string prefix = parent.empty() ? "" : parent + ".";
  const std::string best = nearest(name, names);
  if (!best.empty()) return fmt::format("; did you mean '{}{}'?", prefix, best);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return fmt::format(" (valid keys{}: {})", parent.empty() ? "" : " in '" + parent + "'", list);
}

void decode_value(const Field& field, void* target, const YAML::Node& node, const std::string& key,
                  const Where& where) {
  const Rules& r = field.rules;
  switch (field.kind) {
    case Kind::kInt:
      *static_cast<int64_t*>(target) = decode_int(r, node, key, where);
      break;
    case Kind::kDouble:
      *static_cast<double*>(target) = decode_double(node, key, where);
      break;
    case Kind::kBool: {
      bool v = false;
      if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v)) {
        fail(where, key,
             fmt::format("expected a boolean (true or false), got {}", describe_node(node)));
      }
      *static_cast<bool*>(target) = v;
      break;
    }
    case Kind::kString:
      if (!node.IsScalar() && !node.IsNull()) {
        fail(where, key, fmt::format("expected a string, got {}", describe_node(node)));
      }
      *static_cast<std::string*>(target) = node.IsNull() ? "" : node.Scalar();
      break;
    case Kind::kIntList:
      *static_cast<std::vector<int64_t>*>(target) = decode_list<int64_t>(
          field, node, key, where, [&r](const YAML::Node& n, const std::string& k, const Where& w) {
            return decode_int(Rules(), n, k, w);
          });
      break;
    case Kind::kDoubleList:
      *static_cast<std::vector<double>*>(target) =
          decode_list<double>(field, node, key, where, decode_double);
      break;
    case Kind::kTransforms:
      *static_cast<std::vector<TransformOptions>*>(target) =
          decode_list<TransformOptions>(field, node, key, where, decode_transform);
      break;
    case Kind::kOptions:
      decode_options(*static_cast<OptionMap*>(target), node, key, where);
      break;
  }
  check_value(field, target, key, where);
}

std::string format_value(const Field& field, const void* value, const std::string& indent) {
  switch (field.kind) {
    case Kind::kInt: {
      const int64_t v = *static_cast<const int64_t*>(value);
      if (field.rules.auto_value && v == *field.rules.auto_value) return "auto";
      return std::to_string(v);
    }
    case Kind::kDouble:
      return format_double(*static_cast<const double*>(value));
    case Kind::kBool:
      return *static_cast<const bool*>(value) ? "true" : "false";
    case Kind::kString:
      return fmt::format("\"{}\"", json_escape(*static_cast<const std::string*>(value)));
    case Kind::kIntList:
      return format_list(*static_cast<const std::vector<int64_t>*>(value));
    case Kind::kDoubleList:
      return format_list(*static_cast<const std::vector<double>*>(value));
    case Kind::kTransforms: {
      const auto& v = *static_cast<const std::vector<TransformOptions>*>(value);
      if (v.empty()) return "[]";
      // One flow mapping per line, under the key: "\n<indent>- {name: ..., size: [...]}".
      std::string s;
      for (const auto& t : v) {
        std::string item;
        for (const auto& tf : transform_fields()) {
          item += fmt::format("{}{}: {}", item.empty() ? "" : ", ", tf.key,
                              format_value(tf, tf.in(t), indent));
        }
        s += fmt::format("\n{}- {{{}}}", indent, item);
      }
      return s;
    }
    case Kind::kOptions: {
      std::string s;
      for (const auto& [name, v] : static_cast<const OptionMap*>(value)->values()) {
        s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", name, v.yaml);
      }
      return "{" + s + "}";
    }
  }
  return "";
}

}  // namespace brrr::detail
