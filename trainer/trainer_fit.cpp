// Trainer::fit() and what it calls between steps. Reads top to bottom like the algorithm; one
// optimizer step is StepRunner::run (fetch, forward under autocast, scaled backward, accumulate,
// unscale, clip, lr, step, scaler update, zero-grad).
#include <c10/util/Exception.h>
#include <c10/util/ScopeExit.h>

#include <cmath>

#include "core/device.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng_state.h"
#include "data/data_loader.h"
#include "data/prefetcher.h"
#include "models/model.h"
#include "trainer/dist/dist_context.h"
#include "trainer/dist/grad_sync.h"
#include "trainer/evaluator.h"
#include "trainer/observe/step_timer.h"
#include "trainer/observe/sync_counter.h"
#include "trainer/optim/grad_scaler.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/run_outputs.h"
#include "trainer/signals.h"
#include "trainer/step_runner.h"
#include "trainer/trainer.h"

namespace brrr {

namespace {
bool due(int64_t step, int64_t every) {
  return every > 0 && step % every == 0;
}
}  // namespace

void Trainer::fit(const std::string& resume) {
  setup();
  // mem_peak_mib is this fit's peak: it starts from what is allocated now (the model, and the
  // optimizer state of an earlier fit), not from what an earlier fit or the program used.
  if (device_.is_cuda()) detail::cuda_reset_peak_memory(device_.index());
  const TrainOptions& t = config_.train;
  history_.clear();
  stop_reason_.reset();
  stop_wanted_.reset();
  // The run's outputs live as long as this call, also when it ends by an exception.
  const auto end_of_run = c10::make_scope_exit([this] {
    if (outputs_) history_ = outputs_->history();
    stop_vote_.reset();
    prefetcher_.reset();
    outputs_.reset();
  });
  open_outputs(resume);
  if (const auto& from = outputs_->resume_checkpoint()) resume_from(*from);

  StopSignalGuard signals;
  SyncCounter syncs;
  StepTimer timer(device_);
  StepRunnerOptions step_options;
  step_options.grad_accum_steps = t.grad_accum_steps;
  step_options.max_grad_norm = t.max_grad_norm;
  step_options.precision = precision_;
  step_options.device = device_;
  step_options.grad_sync = grad_sync_.get();
  step_options.graph = cuda_graph_.mode;
  StepRunner runner(step_options, params_, *optimizer_, *schedule_, *scaler_,
                    [this](const Batch& batch) { return training_step(batch); });
  cuda_graph_outcome_ = cuda_graph_.mode == GraphMode::kOff ? "off: " + cuda_graph_.reason : "";
  const StepRunner::BatchSource next_batch = [this] { return next_train_batch(); };

  outputs_->begin(counters_.step);
  outputs_->log(log::Level::kInfo,
                fmt::format("training {} for {} steps on {} ({}), precision {}{}", config_.model.name,
                            t.max_steps, device_.str(), device_name(device_), t.precision,
                            t.deterministic ? ", deterministic algorithms only" : ""));
  if (dist_) {
    outputs_->log(
        log::Level::kInfo,
        fmt::format("data-parallel on {} ranks: {} examples per step ({} per rank x {} "
                    "micro-batches)",
                    world_size(), config_.data.batch_size * t.grad_accum_steps * world_size(),
                    config_.data.batch_size, t.grad_accum_steps));
    stop_vote_ = std::make_unique<StopVote>(*dist_);
  }
  notify([this](Callback& cb) { cb.on_train_start(*this); });
  prefetcher_ = std::make_unique<Prefetcher>(*train_loader_, device_);
  prefetcher_->start_epoch(counters_.epoch, counters_.batches_in_epoch);
  model_->train();
  WindowAccumulators window;
  window.reset(device_);
  int64_t total_syncs = 0, steps_logged = 0;
  syncs.arm(true);

  while (counters_.step < t.max_steps && !stop_reason_) {
    const int64_t step = counters_.step;  // the step being taken, 0-based
    const bool last = step + 1 == t.max_steps;
    const bool log_after = due(step + 1, t.log_every) || last;
    outputs_->profile_before_step(step);
    const int64_t examples = window.examples, tokens = window.tokens;
    if (!run_step_or_stop(runner, next_batch, window, timer, log_after)) break;
    if (const auto report = runner.take_report()) {
      if (report->warning) {
        outputs_->warn(report->message);
        cuda_graph_outcome_ = "off: " + report->message;
      } else {
        outputs_->log(log::Level::kInfo, report->message);
        cuda_graph_outcome_ = "captured";
      }
    }
    // Counted over all ranks (they take equal micro-batches), so a checkpoint means the same on
    // any number of ranks.
    counters_.examples_seen += (window.examples - examples) * world_size();
    counters_.tokens_seen += (window.tokens - tokens) * world_size();
    counters_.step = step + 1;
    outputs_->profile_after_step(counters_.step);
    notify([this](Callback& cb) { cb.on_step_end(*this, counters_.step); });

    syncs.arm(false);  // what follows reads the device on purpose
    if (log_after) {
      const int64_t window_syncs = syncs.take();
      total_syncs += window_syncs;
      steps_logged += window.steps;
      log_window(window, timer, window_syncs);
    }
    if (evaluator_ && (due(counters_.step, t.eval_every) || last)) {
      try {
        evaluate_and_record();
      } catch (const StopRequested& e) {
        model_->train();
        request_stop(fmt::format("signal {} received; {} (evaluation skipped)",
                                 StopSignalGuard::pending(), e.what()));
      }
      // A stop asked for by the evaluation's callbacks (early stopping: the same metrics, so
      // the same decision on every rank) takes effect now, as in one process; the evaluation
      // has synchronised the ranks already, so agreeing costs nothing more.
      if (dist_) adopt_stop_if(dist_->any(stop_wanted_.has_value()));
    }
    if (StopSignalGuard::pending() != 0) {
      request_stop(fmt::format("signal {} received", StopSignalGuard::pending()));
    }
    if (stop_vote_) adopt_stop_if(stop_vote_->cast(stop_wanted_.has_value()));
    if (due(counters_.step, t.checkpoint_every) || last || stop_reason_) save_checkpoint();
    syncs.arm(true);
  }
  syncs.arm(false);
  if (stop_reason_) {
    outputs_->warn(fmt::format("training stopped at step {}: {}", counters_.step, *stop_reason_));
  }
  outputs_->finish(run_facts(total_syncs, steps_logged));
  notify([this](Callback& cb) { cb.on_train_end(*this); });
}

void Trainer::adopt_stop_if(bool agreed) {
  if (agreed && !stop_reason_) stop_reason_ = stop_wanted_.value_or("another rank asked to stop");
}

void Trainer::open_outputs(const std::string& resume) {
  const TrainOptions& t = config_.train;
  RunOutputsOptions options;
  options.run_dir = run_dir_;
  options.device = device_;
  options.max_steps = t.max_steps;
  options.keep_checkpoints = t.keep_checkpoints;
  options.profile = t.profile;
  options.resume = resume;
  options.overwrite = config_.run.overwrite;
  if (!dist_) {
    outputs_ = std::make_unique<RunOutputs>(options, config_yaml());
    return;
  }
  // Rank 0 alone writes the run directory and decides where the run starts (the checkpoint of
  // --resume auto, or afresh); the other ranks follow that decision and write nothing.
  constexpr char kFailed = '\x01';
  std::string start;
  if (dist_->is_main()) {
    try {
      outputs_ = std::make_unique<RunOutputs>(options, config_yaml());
    } catch (...) {
      dist_->from_rank0("where the run starts", std::string(1, kFailed));
      throw;
    }
    start = outputs_->resume_checkpoint().value_or("");
  }
  start = dist_->from_rank0("where the run starts", start);
  if (dist_->is_main()) return;
  if (start == std::string(1, kFailed)) {
    throw Error(
        fmt::format("rank {}: rank 0 could not open the run directory '{}' (its message "
                    "says why)",
                    rank(), run_dir_));
  }
  options.write = false;
  options.resume = start;
  options.start_decided = true;
  outputs_ = std::make_unique<RunOutputs>(options, config_yaml());
}

bool Trainer::run_step_or_stop(StepRunner& runner, const StepRunner::BatchSource& next_batch,
                               WindowAccumulators& window, StepTimer& timer, bool log_after) {
  // A stop request can end the wait for a micro-batch inside the step. The state is then put
  // back to where the step began (the parameters are untouched until the optimizer step; the
  // data position and, with accumulation, the RNG are restored), and that state is checkpointed.
  const TrainCounters before = counters_;
  std::optional<RngState> rng_before;
  if (config_.train.grad_accum_steps > 1) rng_before = capture_rng_state();
  try {
    runner.run(counters_.step, next_batch, window, &timer, log_after);
    return true;
  } catch (const StopRequested& e) {
    counters_ = before;
    if (rng_before) restore_rng_state(*rng_before);
    request_stop(fmt::format("signal {} received; {}", StopSignalGuard::pending(), e.what()));
    save_checkpoint();
    return false;
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    if (!dist_) throw;
    throw Error(collective_failure(e.what_without_backtrace()));
  } catch (const std::exception& e) {  // Gloo's own exceptions reach here through autograd
    if (!dist_) throw;
    throw Error(collective_failure(e.what()));
  }
}

std::string Trainer::collective_failure(const std::string& what) const {
  const std::string first = what.substr(0, what.find('\n'));
  return fmt::format(
      "rank {} of {}: step {} failed: {} (a rank waits at most "
      "run.dist_timeout_s = {} s for the others in a step; is one of them dead, "
      "stopped or far behind?)",
      rank(), world_size(), counters_.step + 1, first, config_.run.dist_timeout_s);
}

RunFacts Trainer::run_facts(int64_t host_syncs, int64_t steps_logged) const {
  RunFacts facts;
  facts.step = counters_.step;
  facts.examples_seen = counters_.examples_seen;
  facts.tokens_seen = counters_.tokens_seen;
  facts.num_workers = config_.data.num_workers;
  facts.pin_memory = train_loader_->pinned();
  facts.prefetch_factor = config_.data.prefetch_factor;
  facts.batch_size = config_.data.batch_size;
  facts.grad_accum_steps = config_.train.grad_accum_steps;
  facts.tensor_cores = has_tensor_cores(device_);
  facts.host_syncs = host_syncs;
  facts.steps_logged = steps_logged;
  facts.device_name = device_name(device_);
  facts.precision = config_.train.precision;
  facts.cuda_graph = cuda_graph_outcome_.empty() ? "not captured yet" : cuda_graph_outcome_;
  return facts;
}

FetchedBatch Trainer::next_train_batch() {
  FetchedBatch fetched;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::optional<Batch> batch = prefetcher_->next();
    fetched.wait_seconds += prefetcher_->last_wait_seconds();
    if (batch) {
      ++counters_.batches_in_epoch;
      fetched.batch = prepare_batch(std::move(*batch));
      fetched.copy_events = prefetcher_->last_copy_events();
      return fetched;
    }
    // Epoch boundary: the sample order of the next epoch comes from (seed, epoch).
    ++counters_.epoch;
    counters_.batches_in_epoch = 0;
    prefetcher_->start_epoch(counters_.epoch, 0);
  }
  throw Error(fmt::format("the training data yields no batch in epoch {} ({})", counters_.epoch,
                          train_set_->describe()));
}

void Trainer::log_window(WindowAccumulators& window, StepTimer& timer, int64_t syncs) {
  if (window.steps == 0) return;
  // The one sync of a logging window: loss, non-finite flag and grad norm in a single copy.
  std::vector<at::Tensor> parts = {window.loss_sum.reshape({1}), window.bad_loss.reshape({1}),
                                   window.first_bad.to(at::kFloat).reshape({1})};
  if (window.grad_norm.defined()) parts.push_back(window.grad_norm.to(at::kFloat).reshape({1}));
  at::Tensor values = at::cat(parts).to(at::kDouble);
  if (dist_) {
    // Appended: the loss sum over all ranks and how many ranks saw a non-finite loss, so that
    // every rank logs the same mean and stops at this same step. (The grad norm is the same on
    // every rank: the gradients are.)
    at::Tensor shared = at::stack({values[0], values[2].ge(0).to(at::kDouble)});
    dist_->sum(shared);
    values = at::cat({values, shared});
  }
  const at::Tensor host = values.to(at::kCPU);
  const double* v = host.data_ptr<double>();
  const std::string where = dist_ ? fmt::format("rank {}: ", rank()) : "";
  const std::string last_good = last_checkpoint_.empty() ? "none" : last_checkpoint_;
  if (v[2] >= 0) {
    throw TrainingError(fmt::format(
        "{}non-finite loss {} at step {} (precision {}); last good "
        "checkpoint: {}",
        where, v[1], static_cast<int64_t>(v[2]) + 1, config_.train.precision, last_good));
  }
  const int64_t n = host.numel();
  if (dist_ && v[n - 1] > 0) {
    throw TrainingError(fmt::format(
        "{}the loss of {} other rank(s) was not finite in the window "
        "that ends at step {} (precision {}); last good checkpoint: {}",
        where, static_cast<int64_t>(v[n - 1]), counters_.step, config_.train.precision, last_good));
  }
  const double loss_sum = dist_ ? v[n - 2] / static_cast<double>(world_size()) : v[0];
  const StepBreakdown breakdown = timer.collect();
  // The window's wall time as the step timer measured it (steps x step_ms): rates and the
  // breakdown then describe the same interval.
  const double elapsed_s = breakdown.step_ms * static_cast<double>(window.steps) / 1e3;

  MetricRecord record;
  record.kind = RecordKind::kTrain;
  record.step = counters_.step;
  auto& r = record.values;
  r[metric::kEpoch] = static_cast<double>(counters_.epoch);
  r[metric::kLoss] = loss_sum / static_cast<double>(window.steps);
  r[metric::kLr] = window.last_lr;
  if (window.grad_norm.defined()) r[metric::kGradNorm] = v[3];
  // Rates of the whole run: every rank trains on as many examples as this one.
  const auto ranks = static_cast<double>(world_size());
  r[metric::kSamplesPerS] =
      elapsed_s > 0 ? ranks * static_cast<double>(window.examples) / elapsed_s : 0;
  // Only a language model counts tokens; an image model has no tokens_per_s (not a 0).
  if (window.tokens > 0) {
    r[metric::kTokensPerS] =
        elapsed_s > 0 ? ranks * static_cast<double>(window.tokens) / elapsed_s : 0;
  }
  r[metric::kStepTimeMs] = breakdown.step_ms;
  r[metric::kWindowSteps] = static_cast<double>(window.steps);
  // The time the device sat idle waiting for data (on CUDA a host wait hidden behind queued GPU
  // work costs nothing and is not counted), and beside it the host's whole wait.
  const double step_ms = breakdown.step_ms;
  r[metric::kDataWaitPct] = step_ms > 0 ? 100.0 * breakdown.data_wait_ms / step_ms : 0.0;
  r[metric::kHostDataWaitPct] = step_ms > 0 ? 100.0 * breakdown.host_data_wait_ms / step_ms : 0.0;
  r[metric::kHostSyncsPerStep] = static_cast<double>(syncs) / static_cast<double>(window.steps);
  if (scaler_->enabled()) r[metric::kLossScale] = scaler_->scale_value();
  for (const auto& [name, ms] : breakdown.as_map()) r[metric::kBreakdownPrefix + name] = ms;
  if (breakdown.has_copies) r[metric::kCopyOverlappedMs] = breakdown.copy_total_ms;
  if (grad_sync_) {
    for (const auto& [name, ms] : grad_sync_->backward_times()) r[metric::kCommPrefix + name] = ms;
  }
  if (device_.is_cuda()) r[metric::kMemPeakMib] = detail::cuda_peak_memory_mib(device_.index());
  outputs_->record(std::move(record));
  window.reset(device_);
}

Metrics Trainer::evaluate() {
  setup();
  if (!evaluator_) return {};
  notify([this](Callback& cb) { cb.on_eval_begin(*this); });
  Metrics metrics = evaluator_->run(
      *model_, [this](Batch batch) { return prepare_batch(std::move(batch)); },
      [this](const Batch& batch) { return validation_step(batch); });
  notify([&](Callback& cb) { cb.on_eval_end(*this, counters_.step, metrics); });
  return metrics;
}

void Trainer::evaluate_and_record() {
  const Metrics metrics = evaluate();
  const std::string& watched = config_.schedule.metric;
  if (metrics.count(watched)) schedule_->on_eval(metrics.at(watched));
  std::string line;
  for (const auto& [name, value] : metrics) line += fmt::format(" {} {:.4f}", name, value);
  outputs_->log(log::Level::kInfo, fmt::format("eval step {}:{}", counters_.step, line));
  MetricRecord record;
  record.kind = RecordKind::kEval;
  record.step = counters_.step;
  record.values = metrics;
  outputs_->record(std::move(record));
}

}  // namespace brrr
