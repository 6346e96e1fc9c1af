// Trainer::fit() and what it calls each step. Reads top to bottom like the algorithm:
// fetch, forward under autocast, scaled backward, accumulate, unscale, clip, step, schedule, log.
#include <filesystem>
#include <fstream>

#include "core/checkpoint_io.h"
#include "core/device.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gpu_monitor.h"
#include "core/grad_scaler.h"
#include "core/log.h"
#include "core/precision.h"
#include "data/data_loader.h"
#include "data/prefetcher.h"
#include "models/model.h"
#include "trainer/doctor.h"
#include "trainer/grad_clip.h"
#include "trainer/jsonl_writer.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
#include "trainer/profiler.h"
#include "trainer/progress.h"
#include "trainer/signals.h"
#include "trainer/step_timer.h"
#include "trainer/sync_counter.h"
#include "trainer/tensorboard_writer.h"
#include "trainer/trainer.h"

namespace brrr {

namespace fs = std::filesystem;

namespace {
bool due(int64_t step, int64_t every) {
  return every > 0 && step % every == 0;
}
}  // namespace

struct Trainer::LogWindow {
  at::Tensor loss_sum;   // () float32: sum over steps of each step's mean loss
  at::Tensor first_bad;  // () int64: first step whose loss was not finite, -1 if none
  at::Tensor bad_loss;   // () float32: that loss
  at::Tensor grad_norm;  // () float32: the last step's global grad norm (undefined if not computed)
  int64_t steps = 0;
  int64_t examples = 0;
  int64_t tokens = 0;
  std::chrono::steady_clock::time_point start;

  void reset(c10::Device device) {
    const auto opts = at::TensorOptions().device(device);
    loss_sum = at::zeros({}, opts.dtype(at::kFloat));
    first_bad = at::full({}, -1, opts.dtype(at::kLong));
    bad_loss = at::zeros({}, opts.dtype(at::kFloat));
    grad_norm = at::Tensor();
    steps = examples = tokens = 0;
    start = std::chrono::steady_clock::now();
  }
};

void Trainer::fit(const std::string& resume) {
  setup();
  fs::create_directories(run_dir_);
  {
    std::ofstream out(fs::path(run_dir_) / "config.yaml");
    out << to_yaml(config_);
  }
  checkpoints_ = std::make_unique<CheckpointStore>(run_dir_, config_.train.keep_checkpoints);
  resume_from(resume);

  StopSignalGuard signals;
  SyncCounter syncs;
  timer_ = std::make_unique<StepTimer>(device_);
  jsonl_ = std::make_unique<JsonlWriter>((fs::path(run_dir_) / "metrics.jsonl").string());
  tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir_);
  ProgressOptions progress_options;
  progress_options.max_steps = config_.train.max_steps;
  progress_options.start_step = step_;
  progress_ = std::make_unique<ProgressLine>(progress_options);
  const auto t0 = std::chrono::steady_clock::now();
  start_time_ = t0;
  if (device_.is_cuda()) {
    gpu_monitor_ = std::make_unique<GpuMonitor>(
        device_.index(), (fs::path(run_dir_) / "gpu.jsonl").string(), 100, t0);
    gpu_monitor_->start();
  }

  log::info("training {} for {} steps on {} ({}), precision {}", config_.model.name,
            config_.train.max_steps, device_.str(), device_name(device_), config_.train.precision);
  on_train_start();
  for (auto& cb : callbacks_) cb->on_train_start(*this);

  prefetcher_ = std::make_unique<Prefetcher>(*train_loader_, device_);
  prefetcher_->start_epoch(epoch_, batches_in_epoch_);
  model_->train();
  LogWindow window;
  window.reset(device_);
  syncs.arm(true);

  while (step_ < config_.train.max_steps && !stop_reason_) {
    start_profiler_if_due();
    train_one_step(window);
    ++step_;
    stop_profiler_if_due();
    on_step_end(step_);
    for (auto& cb : callbacks_) cb->on_step_end(*this, step_);

    const bool last = step_ == config_.train.max_steps;
    if (due(step_, config_.train.log_every) || last) {
      syncs.arm(false);
      window_syncs_ += syncs.take();
      log_step(window);
      syncs.arm(true);
    }
    if (val_set_ && (due(step_, config_.train.eval_every) || last)) {
      syncs.arm(false);
      run_eval_and_callbacks();
      syncs.arm(true);
    }
    if (StopSignalGuard::pending() != 0) {
      request_stop(fmt::format("signal {} received", StopSignalGuard::pending()));
    }
    if (due(step_, config_.train.checkpoint_every) || last || stop_reason_) {
      syncs.arm(false);
      save_checkpoint();
      syncs.arm(true);
    }
  }
  syncs.arm(false);
  progress_->finish();
  if (stop_reason_)
    progress_->log(log::Level::kWarn,
                   fmt::format("training stopped at step {}: {}", step_, *stop_reason_));
  if (profiler_) profiler_.reset();
  if (gpu_monitor_) gpu_monitor_->stop();
  write_summary();
  on_train_end();
  for (auto& cb : callbacks_) cb->on_train_end(*this);
  prefetcher_.reset();
}

std::optional<Batch> Trainer::next_train_batch(double* wait_seconds) {
  *wait_seconds = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::optional<Batch> batch = prefetcher_->next();
    *wait_seconds += prefetcher_->last_wait_seconds();
    if (batch) {
      ++batches_in_epoch_;
      return prepare_batch(std::move(*batch));
    }
    // Epoch boundary: the sample order of the next epoch comes from (seed, epoch).
    ++epoch_;
    batches_in_epoch_ = 0;
    prefetcher_->start_epoch(epoch_, 0);
  }
  throw Error(fmt::format("the training data yields no batch in epoch {} ({})", epoch_,
                          train_set_->describe()));
}

void Trainer::train_one_step(LogWindow& window) {
  const int64_t accum = config_.train.grad_accum_steps;
  timer_->step_begin();
  for (int64_t micro = 0; micro < accum; ++micro) {
    double wait = 0;
    const Batch batch = *next_train_batch(&wait);
    timer_->add_data_wait(wait);
    timer_->set_copy_events(prefetcher_->last_copy_events());

    timer_->mark(StepTimer::Mark::kForwardBegin);
    StepOutput out;
    {
      AutocastGuard autocast(precision_, device_);
      out = training_step(batch);
    }
    timer_->mark(StepTimer::Mark::kForwardEnd);
    // Dividing by accum makes N micro-batches of B/N produce the gradient of one batch of B.
    scaler_->scale(out.loss / static_cast<double>(accum)).backward();
    timer_->mark(StepTimer::Mark::kBackwardEnd);

    // Non-finite tracking stays on the device: remember the first bad step and its loss.
    const at::Tensor loss = out.loss.detach().to(at::kFloat);
    const at::Tensor bad = loss.isfinite().logical_not().logical_and(window.first_bad.lt(0));
    window.first_bad =
        at::where(bad, at::full({}, step_, window.first_bad.options()), window.first_bad);
    window.bad_loss = at::where(bad, loss, window.bad_loss);
    window.loss_sum.add_(loss, 1.0 / static_cast<double>(accum));
    window.examples += out.examples;
    window.tokens += out.tokens;
    examples_seen_ += out.examples;
    tokens_seen_ += out.tokens;
  }
  scaler_->unscale(params_);
  const double max_norm = config_.train.max_grad_norm;
  const bool log_next =
      due(step_ + 1, config_.train.log_every) || step_ + 1 == config_.train.max_steps;
  if (max_norm > 0) {
    window.grad_norm = clip_grad_norm(params_, max_norm);
  } else if (log_next) {
    window.grad_norm = total_grad_norm(params_);
  }
  optimizer_->set_lr(schedule_->lr_at(step_));
  if (scaler_->enabled()) {
    optimizer_->step(nullptr, &scaler_->found_inf());
  } else {
    optimizer_->step();
  }
  scaler_->update();
  optimizer_->zero_grad();
  timer_->mark(StepTimer::Mark::kOptimizerEnd);
  timer_->step_end();
  ++window.steps;
}

void Trainer::log_step(LogWindow& window) {
  if (window.steps == 0) return;
  // The one sync of a logging window: loss, non-finite flag and grad norm in a single copy.
  std::vector<at::Tensor> parts = {window.loss_sum.reshape({1}), window.bad_loss.reshape({1}),
                                   window.first_bad.to(at::kFloat).reshape({1})};
  if (window.grad_norm.defined()) parts.push_back(window.grad_norm.to(at::kFloat).reshape({1}));
  const at::Tensor host = at::cat(parts).to(at::kCPU).to(at::kDouble);
  ++host_syncs_;
  const double* v = host.data_ptr<double>();
  const double loss = v[0] / static_cast<double>(window.steps);
  if (v[2] >= 0) {
    throw TrainingError(
        fmt::format("non-finite loss {} at step {} (precision {}); last good checkpoint: {}", v[1],
                    static_cast<int64_t>(v[2]) + 1, config_.train.precision,
                    last_checkpoint_.empty() ? "none" : last_checkpoint_));
  }
  const StepBreakdown breakdown = timer_->collect();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - window.start).count();

  Metrics record;
  record["step"] = static_cast<double>(step_);
  record["epoch"] = static_cast<double>(epoch_);
  record["time_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
  record["loss"] = loss;
  record["lr"] = schedule_->lr_at(step_ - 1);
  if (window.grad_norm.defined()) record["grad_norm"] = v[3];
  record["samples_per_s"] = static_cast<double>(window.examples) / elapsed;
  record["tokens_per_s"] = static_cast<double>(window.tokens) / elapsed;
  record["step_time_ms"] = breakdown.step_ms;
  // The time the device sat idle waiting for data (on CUDA a host wait hidden behind queued GPU
  // work costs nothing and is not counted), and beside it the host's whole wait.
  record["data_wait_pct"] =
      breakdown.step_ms > 0 ? 100.0 * breakdown.data_wait_ms / breakdown.step_ms : 0.0;
  record["host_data_wait_pct"] =
      breakdown.step_ms > 0 ? 100.0 * breakdown.host_data_wait_ms / breakdown.step_ms : 0.0;
  record["host_syncs_per_step"] =
      static_cast<double>(window_syncs_) / static_cast<double>(window.steps);
  if (scaler_->enabled()) record["loss_scale"] = scaler_->scale_value();
  for (const auto& [name, ms] : breakdown.as_map()) record["breakdown_ms/" + name] = ms;
  if (breakdown.has_copies) record["copy_overlapped_ms"] = breakdown.copy_total_ms;
  if (device_.is_cuda()) record["mem_peak_mib"] = detail::cuda_peak_memory_mib(device_.index());
  write_record(record, "train");
  ProgressStats stats;
  stats.step = step_;
  stats.loss = loss;
  stats.lr = record["lr"];
  stats.samples_per_s = record["samples_per_s"];
  if (window.tokens > 0) stats.tokens_per_s = record["tokens_per_s"];
  stats.data_wait_pct = record["data_wait_pct"];
  progress_->update(stats);

  total_syncs_ += window_syncs_;
  total_steps_logged_ += window.steps;
  window_syncs_ = 0;
  window.reset(device_);
}

}  // namespace brrr
