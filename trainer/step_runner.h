#pragma once
// StepRunner: exactly one optimizer step, and nothing else. For each of grad_accum_steps
// micro-batches: fetch, forward under autocast, scaled backward; then unscale and the non-finite
// check, clipping, the learning rate of the step, the optimizer update, the scaler update, zeroing
// the gradients, and the device-side accumulation of the logging window (loss sum, first
// non-finite step, grad norm).
//
// Invariants:
//  * No file or log I/O and no host-device sync: this is the unit a CUDA graph captures and a
//    gradient Reducer hooks. Values are read on the host only by the caller, on logging steps;
//    what the runner has to say (a graph captured, a capture refused) waits in take_report().
//  * Every per-step value the device reads is a device tensor written before the step (the lr
//    through the optimizer, the step number for the non-finite record), and the window's sums
//    are updated in place, so a captured step replays with this step's values.
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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/precision.h"
#include "data/dataset.h"
#include "trainer/cuda_graph_policy.h"
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
class StepGraph;

/// Eager steps of one batch shape before train.cuda_graph captures it (the last runs on the
/// capture stream): the first does cuDNN's autotuning, lazy initialisation and the optimizer's
/// state.
inline constexpr int64_t kGraphWarmupSteps = 2;

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

  /// Zeroes everything on `device` for a new window, in place when the tensors exist there (a
  /// captured step keeps writing the same storage).
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
  /// CUDA graph (decide_cuda_graph): kOff, or capture after `graph_warmup_steps` eager steps of
  /// one batch shape and replay from then on.
  GraphMode graph = GraphMode::kOff;
  /// Eager steps of a batch shape before it is captured (run, as every eager step of graph
  /// mode, on the capture stream).
  int64_t graph_warmup_steps = kGraphWarmupSteps;
};

/// What the runner reports about its CUDA graph, once per event, for the caller to log.
struct StepRunnerReport {
  bool warning = false;
  std::string message;
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
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  /// Takes optimizer step `step` (0-based: lr_at(step) is its learning rate), accumulating into
  /// `window`. `timer` (may be null) gets the phase marks. `want_grad_norm`: compute the grad norm
  /// even without clipping (the caller logs after this step; a graphed step always computes it).
  /// With GraphMode::kRequire, a step that refuses capture throws Error with the cause.
  void run(int64_t step, const BatchSource& next_batch, WindowAccumulators& window,
           StepTimer* timer, bool want_grad_norm);

  const StepRunnerOptions& options() const { return options_; }
  /// What happened to the graph since the last call (captured, re-captured, refused), if anything.
  std::optional<StepRunnerReport> take_report();

 private:
  /// Steps in graph mode: all micro-batches are fetched first (the replay needs them all).
  void run_graph_mode(const BatchSource& next_batch, WindowAccumulators& window, StepTimer* timer);
  /// Forward, loss bookkeeping and scaled backward of micro-batch `micro`.
  StepOutput micro_step(const Batch& batch, int64_t micro, WindowAccumulators& window,
                        StepTimer* timer);
  /// Unscale, clip, optimizer step, scaler update.
  void finish_step(WindowAccumulators& window, bool want_grad_norm);
  /// One eager step over already fetched micro-batches (graph mode's warm-up and fallback).
  void eager_step(const std::vector<Batch>& batches, WindowAccumulators& window, StepTimer* timer);
  /// Captures the step over `batches` and takes it by a replay; false (state restored) when the
  /// capture was refused.
  bool capture_and_replay(const std::vector<Batch>& batches, WindowAccumulators& window);
  void replay(const std::vector<Batch>& batches, WindowAccumulators& window);
  void report(bool warning, std::string message);

  StepRunnerOptions options_;
  std::vector<at::Tensor> params_;
  Optimizer& optimizer_;
  const LrSchedule& schedule_;
  GradScaler& scaler_;
  StepFunction step_function_;
  at::Tensor step_on_device_;  // () int64: the step being taken, for the non-finite record

  // Graph mode (options_.graph != kOff).
  std::unique_ptr<StepGraph> graph_;
  /// The captured step's host-side results, added to the window on every replay.
  int64_t graph_examples_ = 0, graph_tokens_ = 0;
  at::Tensor graph_grad_norm_;          // the captured norm: rewritten by every replay
  const void* graph_window_ = nullptr;  // the window whose tensors the graph writes
  /// The batch signature of the last eager steps and how many in a row had it.
  std::string eager_signature_;
  int64_t eager_streak_ = 0;
  std::optional<StepRunnerReport> report_;
};

}  // namespace brrr
