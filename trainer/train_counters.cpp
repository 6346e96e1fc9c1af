#include "trainer/train_counters.h"

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include "core/error.h"

namespace brrr {

namespace {
constexpr int64_t kFields = 5;
}

void TrainCounters::save(torch::serialize::OutputArchive& archive) const {
  archive.write("counters", at::tensor(std::vector<int64_t>{step, epoch, batches_in_epoch,
                                                            examples_seen, tokens_seen}));
}

void TrainCounters::load(torch::serialize::InputArchive& archive) {
  at::Tensor counters;
  archive.read("counters", counters);
  if (counters.scalar_type() != at::kLong || counters.dim() != 1 || counters.numel() != kFields) {
    throw CheckpointError(fmt::format("checkpoint 'counters' must be {} int64 values, got {} {}",
                                      kFields, c10::toString(counters.scalar_type()),
                                      c10::str(counters.sizes())));
  }
  const auto c = counters.accessor<int64_t, 1>();
  step = c[0];
  epoch = c[1];
  batches_in_epoch = c[2];
  examples_seen = c[3];
  tokens_seen = c[4];
}

}  // namespace brrr
