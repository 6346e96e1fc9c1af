#include "trainer/observe/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/log.h"

namespace brrr {
namespace {

// Protobuf wire types (https://protobuf.dev/programming-guides/encoding/).
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;
constexpr const char* kFileVersion = "brain.Event:2";

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

// Little-endian, independent of the host's byte order.
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

void put_int64(std::string& out, uint32_t field, int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));  // int64 negatives are 10-byte two's complement
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

namespace detail {

std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::map<std::string, float>& tagged_values) {
  std::string summary;
  for (const auto& [tag, value] : tagged_values) {
    std::string v;
    put_bytes(v, 1, tag);      // Summary.Value.tag
    put_float(v, 2, value);    // Summary.Value.simple_value
    put_bytes(summary, 1, v);  // Summary.value (repeated)
  }
  std::string event;
  put_double(event, 1, wall_time);  // Event.wall_time
  put_int64(event, 2, step);        // Event.step
  put_bytes(event, 5, summary);     // Event.summary
  return event;
}

std::string encode_text_event(double wall_time, int64_t step, const std::string& tag,
                              const std::string& text) {
  // What TensorBoard's text plugin reads: a Summary.Value whose metadata names the plugin and
  // whose tensor is a scalar DT_STRING.
  std::string plugin;
  put_bytes(plugin, 1, "text");  // PluginData.plugin_name
  std::string metadata;
  put_bytes(metadata, 1, plugin);  // SummaryMetadata.plugin_data
  std::string shape;               // TensorShapeProto without dims: a scalar
  std::string tensor;
  put_int64(tensor, 1, 7);      // TensorProto.dtype = DT_STRING
  put_bytes(tensor, 2, shape);  // TensorProto.tensor_shape
  put_bytes(tensor, 8, text);   // TensorProto.string_val
  std::string value;
  put_bytes(value, 1, tag);       // Summary.Value.tag
  put_bytes(value, 9, metadata);  // Summary.Value.metadata
  put_bytes(value, 8, tensor);    // Summary.Value.tensor
  std::string summary;
  put_bytes(summary, 1, value);
  std::string event;
  put_double(event, 1, wall_time);
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(event, 1, wall_time);
  put_int64(event, 2, 0);
  put_bytes(event, 3, kFileVersion);  // Event.file_version
  return event;
}

std::string frame_tf_record(const std::string& data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_le(record, data.size(), 8);
  put_le(record, crc32c_mask(crc32c(record.data(), 8)), 4);
  record += data;
  put_le(record, crc32c_mask(crc32c(data)), 4);
  return record;
}

}  // namespace detail

TensorBoardWriter::TensorBoardWriter(const std::string& dir, TensorBoardWriterOptions options)
    : options_(options), last_flush_(std::chrono::steady_clock::now()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw Error(
        fmt::format("TensorBoard writer: cannot create directory '{}': {}", dir, ec.message()));
  }
  const double now = unix_now();
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(now), host_name()))
              .string();
  // Append: should a restarted run land on the same second and host, it extends the file rather
  // than truncating records already there (a second header record is harmless to readers).
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) {
    throw Error(fmt::format("TensorBoard writer: cannot open '{}' for writing: {}", path_,
                            std::strerror(errno)));
  }
  try {
    write_record(detail::encode_file_version_event(now));
  } catch (...) {
    std::fclose(file_);
    throw;
  }
  flush_locked();
}

TensorBoardWriter::~TensorBoardWriter() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
  std::fclose(file_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::map<std::string, double>& scalars,
                                    const std::string& prefix) {
  if (scalars.empty()) return;
  std::map<std::string, float> tagged;
  for (const auto& [name, value] : scalars) {
    tagged[prefix.empty() ? name : prefix + "/" + name] = static_cast<float>(value);
  }
  const std::string event = detail::encode_scalar_event(unix_now(), step, tagged);
  std::lock_guard<std::mutex> lock(mutex_);
  write_record(event);
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_flush_).count() >= options_.flush_secs) {
    flush_locked();
  }
}

void TensorBoardWriter::add_text(int64_t step, const std::string& tag, const std::string& text) {
  const std::string event = detail::encode_text_event(unix_now(), step, tag, text);
  std::lock_guard<std::mutex> lock(mutex_);
  write_record(event);
}

void TensorBoardWriter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
}

void TensorBoardWriter::write_record(const std::string& event) {
  const std::string record = detail::frame_tf_record(event);
  // A full stdio buffer may push part of a record out early; that is still an append in order, so
  // a crash truncates only the last record.
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    throw Error(
        fmt::format("TensorBoard writer: write to '{}' failed: {}", path_, std::strerror(errno)));
  }
}

void TensorBoardWriter::flush_locked() {
  if (std::fflush(file_) != 0) {
    // Metrics are not worth killing a training run for: warn and keep going.
    log::warn("TensorBoard writer: flushing '{}' failed: {}", path_, std::strerror(errno));
  }
  last_flush_ = std::chrono::steady_clock::now();
}

}  // namespace brrr
