#include "trainer/jsonl_writer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/json_lines.h"

namespace brrr {
namespace {

// Escaping is core/json_lines' (the reader of these files); JSON Lines has one writer and one reader.
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

// ---- JsonlWriter ------------------------------------------------------------------------------

JsonlWriter::JsonlWriter(const std::string& path) : path_(path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    throw Error(fmt::format("JSONL writer: cannot create directory '{}': {}", parent.string(),
                            ec.message()));
  }
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    throw Error(fmt::format("JSONL writer: cannot open '{}' for appending: {}", path,
                            std::strerror(errno)));
  }
}

JsonlWriter::~JsonlWriter() {
  std::fclose(file_);
}

void JsonlWriter::write(const JsonObject& object) {
  std::string line = object.dump();
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    throw Error(
        fmt::format("JSONL writer: writing to '{}' failed: {}", path_, std::strerror(errno)));
  }
}

void JsonlWriter::add_scalars(int64_t step, const std::map<std::string, double>& scalars,
                              const std::string& prefix) {
  JsonObject record{{"kind", prefix}, {"step", step}};
  for (const auto& [name, value] : scalars) record.set(name, value);
  write(record);
}

void JsonlWriter::flush() {
  // Every line is flushed as it is written; nothing is ever buffered here.
  std::lock_guard<std::mutex> lock(mutex_);
  std::fflush(file_);
}

}  // namespace brrr
