#include "trainer/observe/jsonl_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/json_lines.h"

namespace brrr {
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
