#pragma once
// Writes TensorBoard event files (`events.out.tfevents.<unix time>.<hostname>`) without protobuf
// or TensorFlow: the TFRecord framing and the few Event/Summary protobuf fields are encoded here.
//
// File invariant: the file is a sequence of complete records, each appended with one write in
// order; a crash can leave at most a truncated last record (which readers drop), never damage an
// earlier one. Records reach the OS on flush(): every `flush_secs`, on flush() and on destruction.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "trainer/observe/metric_writer.h"

namespace brrr {

/// Options of TensorBoardWriter.
struct TensorBoardWriterOptions {
  /// Seconds between automatic flushes (checked when a record is added); 0 = flush every record.
  double flush_secs = 10.0;
};

class TensorBoardWriter : public MetricWriter {
 public:
  /// Creates `dir` if needed and opens a new event file in it; writes the `brain.Event:2` header
  /// record. Throws brrr::Error naming the path if the file cannot be created.
  explicit TensorBoardWriter(const std::string& dir, TensorBoardWriterOptions options = {});
  ~TensorBoardWriter() override;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// One Event at `step` holding a simple_value per scalar, tagged "<prefix>/<name>" (just
  /// "<name>" when prefix is empty). Values are stored as float32, as TensorBoard does.
  void add_scalars(int64_t step, const std::map<std::string, double>& scalars,
                   const std::string& prefix) override;
  /// A text summary (TensorBoard's Text tab renders it as Markdown) at `step`, tagged `tag`.
  void add_text(int64_t step, const std::string& tag, const std::string& text);
  void flush() override;

  /// Full path of the event file being written.
  const std::string& path() const { return path_; }

 private:
  // Frames `event` (a serialized Event protobuf) as a TFRecord and appends it. Caller holds mutex_.
  void write_record(const std::string& event);
  void flush_locked();

  std::string path_;
  TensorBoardWriterOptions options_;
  std::FILE* file_ = nullptr;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_flush_;
};

namespace detail {
/// The serialized `Event` protobuf of a scalar summary: wall_time (field 1), step (2) and
/// summary (5) = Summary{ repeated Value{ tag = 1, simple_value = 2 } }. Exposed for tests.
std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::map<std::string, float>& tagged_values);
/// The serialized `Event` of a text summary: Summary{ Value{ tag = 1, metadata = 9 {plugin_data
/// {plugin_name "text"}}, tensor = 8 {dtype DT_STRING, scalar shape, string_val = text} } }.
std::string encode_text_event(double wall_time, int64_t step, const std::string& tag,
                              const std::string& text);
/// The serialized header `Event`: wall_time, step 0 and file_version "brain.Event:2".
std::string encode_file_version_event(double wall_time);
/// TFRecord framing of `data`: u64 length, masked CRC-32C of the length, data, masked CRC of data.
std::string frame_tf_record(const std::string& data);
}  // namespace detail

}  // namespace brrr
