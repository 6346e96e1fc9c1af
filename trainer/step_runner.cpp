#include "trainer/step_runner.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "core/error.h"
#include "trainer/dist/grad_sync.h"
#include "trainer/observe/step_timer.h"
#include "trainer/observe/sync_counter.h"
#include "trainer/optim/grad_clip.h"
#include "trainer/optim/grad_scaler.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizer.h"
#include "trainer/step_graph.h"

namespace brrr {

void WindowAccumulators::reset(c10::Device device) {
  const auto opts = at::TensorOptions().device(device);
  const bool reuse = loss_sum.defined() && loss_sum.device() == device;
  if (reuse) {
    loss_sum.zero_();
    first_bad.fill_(-1);
    bad_loss.zero_();
  } else {
    loss_sum = at::zeros({}, opts.dtype(at::kFloat));
    first_bad = at::full({}, -1, opts.dtype(at::kLong));
    bad_loss = at::zeros({}, opts.dtype(at::kFloat));
  }
  grad_norm = at::Tensor();
  steps = examples = tokens = 0;
  last_lr = 0.0;
}

StepRunner::StepRunner(StepRunnerOptions options, std::vector<at::Tensor> params,
                       Optimizer& optimizer, const LrSchedule& schedule, GradScaler& scaler,
                       StepFunction step_function)
    : options_(options),
      params_(std::move(params)),
      optimizer_(optimizer),
      schedule_(schedule),
      scaler_(scaler),
      step_function_(std::move(step_function)) {
  step_on_device_ = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(options_.device));
  if (options_.graph != GraphMode::kOff) {
    if (options_.grad_sync != nullptr) {
      throw Error("StepRunner: a data-parallel step cannot be captured in a CUDA graph");
    }
    if (options_.graph_warmup_steps < 1) {
      throw Error(fmt::format("StepRunner: graph_warmup_steps must be >= 1, got {}",
                              options_.graph_warmup_steps));
    }
    graph_ = std::make_unique<StepGraph>(options_.device);
  }
}

StepRunner::~StepRunner() {
  // The graph's gradient buffers stay attached between replays; a later runner (another fit())
  // must start from none, as after an eager step.
  if (graph_ && graph_->captured()) optimizer_.zero_grad(/*set_to_none=*/true);
}

std::optional<StepRunnerReport> StepRunner::take_report() {
  return std::exchange(report_, std::nullopt);
}

void StepRunner::report(bool warning, std::string message) {
  report_ = StepRunnerReport{warning, std::move(message)};
}

void StepRunner::run(int64_t step, const BatchSource& next_batch, WindowAccumulators& window,
                     StepTimer* timer, bool want_grad_norm) {
  if (timer) timer->step_begin();
  // The values of this step that the device reads: written before any of its work is queued.
  window.last_lr = schedule_.lr_at(step);
  optimizer_.set_lr(window.last_lr);
  step_on_device_.fill_(step);
  if (options_.graph != GraphMode::kOff) {
    run_graph_mode(next_batch, window, timer);
  } else {
    for (int64_t micro = 0; micro < options_.grad_accum_steps; ++micro) {
      const FetchedBatch fetched = next_batch();
      if (timer) {
        timer->add_data_wait(fetched.wait_seconds);
        timer->set_copy_events(fetched.copy_events);
        timer->mark(StepTimer::Mark::kForwardBegin);
      }
      const StepOutput out = micro_step(fetched.batch, micro, window, timer);
      window.examples += out.examples;
      window.tokens += out.tokens;
    }
    finish_step(window, want_grad_norm);
    optimizer_.zero_grad();
    if (timer) timer->mark(StepTimer::Mark::kOptimizerEnd);
  }
  if (timer) timer->step_end();
  ++window.steps;
}

StepOutput StepRunner::micro_step(const Batch& batch, int64_t micro, WindowAccumulators& window,
                                  StepTimer* timer) {
  const int64_t accum = options_.grad_accum_steps;
  if (options_.grad_sync) options_.grad_sync->before_forward(/*sync=*/micro + 1 == accum);
  StepOutput out;
  {
    AutocastGuard autocast(options_.precision, options_.device);
    out = step_function_(batch);
  }
  if (timer) timer->mark(StepTimer::Mark::kForwardEnd);
  // Dividing by accum makes N micro-batches of B/N produce the gradient of one batch of B.
  scaler_.scale(out.loss / static_cast<double>(accum)).backward();
  if (timer) timer->mark(StepTimer::Mark::kBackwardEnd);

  // Non-finite tracking stays on the device: remember the first bad step and its loss. In place
  // (copy_ of a where() into the window's tensors), with the step number read from the device:
  // the accumulators keep their storage, and a captured step records the step of its replay.
  // (Not masked_fill_ with the step tensor: its CUDA kernel reads a tensor value on the host.)
  const at::Tensor loss = out.loss.detach().to(at::kFloat);
  const at::Tensor bad = loss.isfinite().logical_not().logical_and(window.first_bad.lt(0));
  window.bad_loss.copy_(at::where(bad, loss, window.bad_loss));
  window.first_bad.copy_(at::where(bad, step_on_device_, window.first_bad));
  window.loss_sum.add_(loss, 1.0 / static_cast<double>(accum));
  return out;
}

void StepRunner::finish_step(WindowAccumulators& window, bool want_grad_norm) {
  scaler_.unscale(params_);
  if (options_.max_grad_norm > 0) {
    window.grad_norm = clip_grad_norm(params_, options_.max_grad_norm);
  } else if (want_grad_norm) {
    window.grad_norm = total_grad_norm(params_);
  }
  if (scaler_.enabled()) {
    optimizer_.step(nullptr, &scaler_.found_inf());
  } else {
    optimizer_.step();
  }
  scaler_.update();
}

// ---- graph mode ---------------------------------------------------------------------------------
//
// Steps of one batch shape: `graph_warmup_steps` eager steps, then one capture, whose replay takes
// that step, then replays. A step of another shape (a short last batch) runs eagerly; a new shape
// that stays for graph_warmup_steps + 1 steps is captured anew. The gradients: before the first
// capture eager steps drop them (set_to_none) as usual; the capture allocates them in the graph's
// pool, and its first micro-batch writes them rather than adds, so a replay needs no zeroing. An
// eager step between replays zeroes those same buffers in place and keeps them.
//
// Every eager step of graph mode runs on the capture stream, warm-ups and odd shapes alike.
// cuBLAS keeps a workspace per (thread, stream) in the caching allocator for the life of the
// process (33 MiB on Hopper, for the forward's thread and again for autograd's): eager steps on
// the current stream and a capture on another would hold both streams' workspaces, 66 MiB over the
// eager run's peak on GPT-2.

void StepRunner::run_graph_mode(const BatchSource& next_batch, WindowAccumulators& window,
                                StepTimer* timer) {
  std::vector<Batch> batches;
  for (int64_t micro = 0; micro < options_.grad_accum_steps; ++micro) {
    FetchedBatch fetched = next_batch();
    if (timer) {
      timer->add_data_wait(fetched.wait_seconds);
      timer->set_copy_events(fetched.copy_events);
    }
    batches.push_back(std::move(fetched.batch));
  }
  if (timer) timer->mark(StepTimer::Mark::kForwardBegin);

  if (graph_->matches(batches) && graph_window_ == window.loss_sum.unsafeGetTensorImpl()) {
    replay(batches, window);
    eager_streak_ = 0;
    eager_signature_.clear();
    if (timer) timer->mark(StepTimer::Mark::kGraphEnd);
    return;
  }
  const std::string signature = StepGraph::signature(batches);
  eager_streak_ = signature == eager_signature_ ? eager_streak_ + 1 : 1;
  eager_signature_ = signature;
  if (eager_streak_ <= options_.graph_warmup_steps) {
    graph_->run_on_capture_stream([&] { eager_step(batches, window, timer); });
    return;
  }
  if (capture_and_replay(batches, window)) {
    if (timer) timer->mark(StepTimer::Mark::kGraphEnd);
    return;
  }
  eager_step(batches, window, timer);  // refused under kTry: this step and all later ones eager
}

void StepRunner::eager_step(const std::vector<Batch>& batches, WindowAccumulators& window,
                            StepTimer* timer) {
  const bool graph_buffers = graph_ && graph_->captured();
  if (graph_buffers) optimizer_.zero_grad(/*set_to_none=*/false);
  for (size_t micro = 0; micro < batches.size(); ++micro) {
    const StepOutput out = micro_step(batches[micro], static_cast<int64_t>(micro), window, timer);
    window.examples += out.examples;
    window.tokens += out.tokens;
  }
  // A graphed step always computes the norm; so does its eager twin, so that a window's grad
  // norm does not depend on which of the two took its last step.
  finish_step(window, /*want_grad_norm=*/true);
  if (!graph_buffers) optimizer_.zero_grad();
  if (timer) timer->mark(StepTimer::Mark::kOptimizerEnd);
}

bool StepRunner::capture_and_replay(const std::vector<Batch>& batches, WindowAccumulators& window) {
  const bool recapture = graph_->captured();
  // The graph allocates its own gradient buffers: drop the ones of an earlier graph first.
  optimizer_.zero_grad(/*set_to_none=*/true);
  window.grad_norm = at::Tensor();
  int64_t examples = 0, tokens = 0;
  const int64_t syncs_before = SyncCounter::seen();
  const std::optional<std::string> failure =
      graph_->capture(batches, [&](const std::vector<Batch>& inputs) {
        for (size_t micro = 0; micro < inputs.size(); ++micro) {
          const StepOutput out =
              micro_step(inputs[micro], static_cast<int64_t>(micro), window, nullptr);
          examples += out.examples;
          tokens += out.tokens;
        }
        finish_step(window, /*want_grad_norm=*/true);
      });
  if (failure) {
    // Nothing of the capture ran on the device; undo its host-side traces and go on eagerly.
    scaler_.abandon_step();
    optimizer_.zero_grad(/*set_to_none=*/true);
    window.grad_norm = at::Tensor();
    const std::string cause = capture_refused_message(*failure, SyncCounter::seen() > syncs_before);
    if (options_.graph == GraphMode::kRequire) {
      throw Error(
          fmt::format("train.cuda_graph is true, but the training step cannot be captured "
                      "({}): {}; set train.cuda_graph: auto to run such a step eagerly",
                      StepGraph::signature(batches), cause));
    }
    options_.graph = GraphMode::kOff;
    graph_.reset();
    report(true, fmt::format("train.cuda_graph: the step runs eagerly from now on: {}", cause));
    return false;
  }
  graph_examples_ = examples;
  graph_tokens_ = tokens;
  graph_grad_norm_ = window.grad_norm;
  graph_window_ = window.loss_sum.unsafeGetTensorImpl();
  replay(batches, window);
  report(false, fmt::format("train.cuda_graph: {} the step ({}), replayed from now on",
                            recapture ? "re-captured" : "captured", StepGraph::signature(batches)));
  return true;
}

void StepRunner::replay(const std::vector<Batch>& batches, WindowAccumulators& window) {
  graph_->replay(batches);
  window.examples += graph_examples_;
  window.tokens += graph_tokens_;
  window.grad_norm = graph_grad_norm_;
}

}  // namespace brrr
