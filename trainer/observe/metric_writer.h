#pragma once
// Where the trainer sends scalar metrics (TensorBoard, JSONL, ...). Writers are called from the
// trainer's main thread on logging/eval steps only; implementations need not be thread-safe but
// the ones in brrr are (one mutex each), so a callback thread may also write.
#include <cstdint>
#include <map>
#include <string>

namespace brrr {

class MetricWriter {
 public:
  virtual ~MetricWriter() = default;
  /// Records `scalars` (name -> value) at optimizer step `step` under `prefix` ("train" or
  /// "eval"); e.g. prefix "train" and name "loss" is the TensorBoard tag "train/loss".
  virtual void add_scalars(int64_t step, const std::map<std::string, double>& scalars,
                           const std::string& prefix) = 0;
  /// Pushes buffered records to the operating system (no fsync).
  virtual void flush() = 0;
};

}  // namespace brrr
