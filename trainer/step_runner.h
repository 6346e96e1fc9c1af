#pragma once
// StepRunner: exactly one optimizer step, and nothing else. For each of grad_accum_steps
// micro-batches: fetch, forward under autocast, scaled backward; then unscale and the non-finite
// check, clipping, the learning rate of the step, the optimizer update, the scaler update, zeroing
// the gradients, and the device-side accumulation of the logging window (loss sum, first
// non-finite step, grad norm).
//
// Invariants:
//  * No file or log I/O and no host-device sync: this is the unit a CUDA graph captures and a
//    gradient Reducer hooks. Values are read on the host only by the caller, on logging steps.
//  * Gradients accumulate over the micro-batches with the loss divided by grad_accum_steps, so N
//    micro-batches of B/N give the update of one batch of B.
//  * Data-parallel: only the last micro-batch's backward all-reduces (averages) the gradients,
//    so every rank unscales, checks for inf, clips and steps on the same gradients: the scaler's
//    decision and the clipping norm agree across ranks without further communication.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/precision.h"
#include "data/dataset.h"
#include "trainer/step_output.h"

namespace c10 {
class Event;
}

namespace brrr {

class Optimizer;
class LrSchedule;
class GradScaler;
class StepTimer;
class GradSync;

/// One micro-batch as the step runner receives it: on the device, prepared for the model.
struct FetchedBatch {
  Batch batch;
  /// Host seconds spent waiting for it.
  double wait_seconds = 0.0;
  /// Timing events around its host-to-device copy (null on CPU), for the step timer.
  std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> copy_events;
};

/// The device-side values of one logging window. Written by every step without a sync, read by
/// the host once per window.
struct WindowAccumulators {
  at::Tensor loss_sum;   // () float32: sum over steps of each step's mean loss
  at::Tensor first_bad;  // () int64: first step (0-based) whose loss was not finite, -1 if none
  at::Tensor bad_loss;   // () float32: that loss
  at::Tensor grad_norm;  // () float32: the last step's global grad norm (undefined if not computed)
  int64_t steps = 0;
  int64_t examples = 0;
  int64_t tokens = 0;
  /// Learning rate of the window's last step (a host value: the schedule is a host function).
  double last_lr = 0.0;

  /// Zeroes everything on `device` for a new window.
  void reset(c10::Device device);
};

struct StepRunnerOptions {
  int64_t grad_accum_steps = 1;
  /// Global L2 clip after unscaling; 0 = off (the norm is then computed only when asked for).
  double max_grad_norm = 0.0;
  Precision precision = Precision::kFP32;
  c10::Device device = c10::Device(c10::kCPU);
  /// Data-parallel: the gradients' all-reduce, armed for the last micro-batch's backward only
  /// (null: one process). Owned by the caller.
  GradSync* grad_sync = nullptr;
};

class StepRunner {
 public:
  /// The next micro-batch (never empty: epoch boundaries are the source's business).
  using BatchSource = std::function<FetchedBatch()>;
  /// The loss of one micro-batch (Trainer::training_step); runs under autocast.
  using StepFunction = std::function<StepOutput(const Batch&)>;

  /// `params`: the trainable parameters (what is unscaled and clipped). The optimizer, schedule
  /// and scaler are owned by the caller and must outlive the runner.
  StepRunner(StepRunnerOptions options, std::vector<at::Tensor> params, Optimizer& optimizer,
             const LrSchedule& schedule, GradScaler& scaler, StepFunction step_function);

  /// Takes optimizer step `step` (0-based: lr_at(step) is its learning rate), accumulating into
  /// `window`. `timer` (may be null) gets the phase marks. `want_grad_norm`: compute the grad norm
  /// even without clipping (the caller logs after this step).
  void run(int64_t step, const BatchSource& next_batch, WindowAccumulators& window,
           StepTimer* timer, bool want_grad_norm) const;

  const StepRunnerOptions& options() const { return options_; }

 private:
  StepRunnerOptions options_;
  std::vector<at::Tensor> params_;
  Optimizer& optimizer_;
  const LrSchedule& schedule_;
  GradScaler& scaler_;
  StepFunction step_function_;
};

}  // namespace brrr
