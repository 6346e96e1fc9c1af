#pragma once
// DistContext: this process's part in a data-parallel run — its rank, the c10d process group
// and the few agreements the trainer needs beyond gradient all-reduce: sums of metrics, the
// smallest of a tuned value, rank 0's choice of a string, and a vote on stopping. Every
// collective here is entered by every rank at the same point of the run (the same step, the
// same evaluation), which is what keeps ranks from waiting on each other forever; a rank that
// does not come is an error after run.dist_timeout_s.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/dist/dist_env.h"

namespace c10 {
class Event;
}

namespace brrr {

class DistContext {
 public:
  /// Joins the group of `env` for tensors on `device` (Gloo on CPU, NCCL on CUDA).
  DistContext(const DistEnv& env, c10::Device device, std::chrono::milliseconds timeout);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }
  /// Rank 0, the one that writes the run's outputs.
  bool is_main() const { return env_.rank == 0; }
  const DistEnv& env() const { return env_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }
  /// Where the group's collectives take their tensors (cuda:LOCAL_RANK or the CPU).
  c10::Device device() const { return device_; }
  /// How long a collective waits for the other ranks (run.dist_timeout_s).
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Sums `tensor` (on the group's device) over the ranks, in place; returns when it is done.
  void sum(at::Tensor& tensor) const;
  /// The smallest `value` of any rank (a tuned batch size every rank can use).
  int64_t min(int64_t value) const;
  /// Whether `value` is true on some rank.
  bool any(bool value) const;
  /// Rank 0's `value` on every rank (through the store: no device involved). Every rank calls
  /// it in the same order; `what` names it in errors.
  std::string from_rank0(const std::string& what, const std::string& value);
  /// Rank 0's values of `tensors` copied into every rank's (parameters and buffers at start).
  void broadcast_from_rank0(const std::vector<at::Tensor>& tensors) const;

 private:
  DistEnv env_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int64_t agreements_ = 0;  // from_rank0 calls so far: each has a key of its own
};

/// The agreement on stopping of a data-parallel run: a signal may reach the ranks at different
/// steps, yet all of them must stop after the same one. Each step every rank casts its vote
/// (true: it wants to stop) and reads the outcome of the previous step's vote, which all ranks
/// read alike; on CUDA that read waits only for the previous step, never for the one queued
/// behind it, so the vote costs no stall of the device.
class StopVote {
 public:
  explicit StopVote(const DistContext& dist);
  ~StopVote();
  /// Casts this step's vote; true when some rank voted to stop at the previous step.
  bool cast(bool want_stop);

 private:
  const DistContext& dist_;
  at::Tensor vote_;                    // on the group's device: this step's vote, all-reduced
  at::Tensor host_;                    // its copy on the host (vote_ itself on CPU)
  std::shared_ptr<c10::Event> ready_;  // CUDA: recorded after the copy to host_
  bool cast_ = false;                  // a vote was cast already (host_ holds its outcome)
};

}  // namespace brrr
