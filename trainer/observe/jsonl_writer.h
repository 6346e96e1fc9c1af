#pragma once
// JSON Lines metrics (`runs/<name>/metrics.jsonl`): one JSON object per line (core/json_lines.h's
// JsonObject), keys in insertion order.
//
// Invariant: each line is written with a single write and flushed, so a reader (or a crash) sees
// only whole lines, except possibly a truncated last one. The file is opened for append, so a
// resumed run continues it.
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "core/json_lines.h"
#include "trainer/observe/metric_writer.h"

namespace brrr {

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
