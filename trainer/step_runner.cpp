#include "trainer/step_runner.h"

#include <ATen/ATen.h>

#include "trainer/dist/grad_sync.h"
#include "trainer/observe/step_timer.h"
#include "trainer/optim/grad_clip.h"
#include "trainer/optim/grad_scaler.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizer.h"

namespace brrr {

void WindowAccumulators::reset(c10::Device device) {
  const auto opts = at::TensorOptions().device(device);
  loss_sum = at::zeros({}, opts.dtype(at::kFloat));
  first_bad = at::full({}, -1, opts.dtype(at::kLong));
  bad_loss = at::zeros({}, opts.dtype(at::kFloat));
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
      step_function_(std::move(step_function)) {}

void StepRunner::run(int64_t step, const BatchSource& next_batch, WindowAccumulators& window,
                     StepTimer* timer, bool want_grad_norm) const {
  const int64_t accum = options_.grad_accum_steps;
  if (timer) timer->step_begin();
  for (int64_t micro = 0; micro < accum; ++micro) {
    const FetchedBatch fetched = next_batch();
    if (timer) {
      timer->add_data_wait(fetched.wait_seconds);
      timer->set_copy_events(fetched.copy_events);
      timer->mark(StepTimer::Mark::kForwardBegin);
    }
    if (options_.grad_sync) options_.grad_sync->before_forward(/*sync=*/micro + 1 == accum);
    StepOutput out;
    {
      AutocastGuard autocast(options_.precision, options_.device);
      out = step_function_(fetched.batch);
    }
    if (timer) timer->mark(StepTimer::Mark::kForwardEnd);
    // Dividing by accum makes N micro-batches of B/N produce the gradient of one batch of B.
    scaler_.scale(out.loss / static_cast<double>(accum)).backward();
    if (timer) timer->mark(StepTimer::Mark::kBackwardEnd);

    // Non-finite tracking stays on the device: remember the first bad step and its loss.
    const at::Tensor loss = out.loss.detach().to(at::kFloat);
    // In place (masked_fill_/copy_ into the window's tensors): no new tensors per micro-batch,
    // and the accumulators keep their storage, which a captured step needs.
    const at::Tensor bad = loss.isfinite().logical_not().logical_and(window.first_bad.lt(0));
    window.bad_loss.copy_(at::where(bad, loss, window.bad_loss));
    window.first_bad.masked_fill_(bad, step);
    window.loss_sum.add_(loss, 1.0 / static_cast<double>(accum));
    window.examples += out.examples;
    window.tokens += out.tokens;
  }
  scaler_.unscale(params_);
  if (options_.max_grad_norm > 0) {
    window.grad_norm = clip_grad_norm(params_, options_.max_grad_norm);
  } else if (want_grad_norm) {
    window.grad_norm = total_grad_norm(params_);
  }
  window.last_lr = schedule_.lr_at(step);
  optimizer_.set_lr(window.last_lr);
  if (scaler_.enabled()) {
    optimizer_.step(nullptr, &scaler_.found_inf());
  } else {
    optimizer_.step();
  }
  scaler_.update();
  optimizer_.zero_grad();
  if (timer) {
    timer->mark(StepTimer::Mark::kOptimizerEnd);
    timer->step_end();
  }
  ++window.steps;
}

}  // namespace brrr
