#pragma once
// Data-parallel gradient synchronisation with c10d's Reducer, the C++ engine behind Python's
// DistributedDataParallel: gradients are copied into buckets and each bucket is all-reduced
// (averaged over the ranks) as soon as its last gradient is ready during backward, so
// communication overlaps the rest of backward. The first step uses one bucket; afterwards the
// Reducer rebuilds the buckets (about 25 MiB, the first 1 MiB) in the order backward produced the
// gradients, as DDP does.
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace c10d {
class Reducer;
class Logger;
}  // namespace c10d

namespace brrr {

class GradSync {
 public:
  /// `params` (those that train; `names` in the same order, for c10d's messages) on every rank
  /// in the same order and shapes.
  GradSync(std::vector<at::Tensor> params, const std::vector<std::string>& names,
           c10::intrusive_ptr<c10d::ProcessGroup> group, int64_t bucket_bytes = 25 << 20,
           int64_t first_bucket_bytes = 1 << 20);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  /// Call before the forward of every micro-batch. `sync`: this micro-batch's backward
  /// all-reduces the gradients (the last micro-batch of an optimizer step); otherwise its
  /// gradients only accumulate locally (DDP's no_sync), and no communication happens.
  void before_forward(bool sync);

  /// How backward spent its time, as c10d measures it for DDP (its Logger; the running means in
  /// ms over the steps it samples: the first 10, then every 100th): "backward_compute" (from the
  /// first gradient to the last), "backward_comm" (from the first bucket's all-reduce to the
  /// last one's end) and "overlap" (the part of comm during compute). Empty before a sample.
  std::map<std::string, double> backward_times() const;

 private:
  std::shared_ptr<c10d::Reducer> reducer_;
  std::shared_ptr<c10d::Logger> logger_;
};

/// Copies rank 0's values of `tensors` into every other rank's (coalesced broadcasts), as DDP
/// does with parameters and buffers at start, so that all ranks begin from the same model.
void broadcast_from_rank0(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                          const std::vector<at::Tensor>& tensors);

}  // namespace brrr
