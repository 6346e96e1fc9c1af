#pragma once
// The counters of a run that a checkpoint holds, saved and loaded as one record: where the
// optimizer is (step) and where the data is (epoch and the micro-batches of it consumed), so a
// resumed run continues with the very next batch.
#include <cstdint>

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace brrr {

struct TrainCounters {
  /// Optimizer steps completed.
  int64_t step = 0;
  /// Epoch of the next micro-batch, and the micro-batches of it already handed to the loop.
  int64_t epoch = 0;
  int64_t batches_in_epoch = 0;
  /// Examples and tokens trained on, over the whole run (resumes included).
  int64_t examples_seen = 0;
  int64_t tokens_seen = 0;

  /// Writes the archive key "counters" (one int64 tensor, in the field order above).
  void save(torch::serialize::OutputArchive& archive) const;
  /// Reads what save() wrote; CheckpointError when the key is missing or malformed.
  void load(torch::serialize::InputArchive& archive);
};

}  // namespace brrr
