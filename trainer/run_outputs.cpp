#include "trainer/run_outputs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/checkpoint_io.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gpu_monitor.h"
#include "trainer/observe/doctor.h"
#include "trainer/observe/jsonl_writer.h"
#include "trainer/observe/profiler.h"
#include "trainer/observe/progress.h"
#include "trainer/observe/tensorboard_writer.h"

namespace brrr {

namespace fs = std::filesystem;

RunOutputs::RunOutputs(RunOutputsOptions options, const std::string& config_yaml)
    : options_(std::move(options)), start_(std::chrono::steady_clock::now()) {
  checkpoints_ = std::make_unique<CheckpointStore>(options_.run_dir, options_.keep_checkpoints,
                                                   options_.write);
  if (!options_.write) return;
  fs::create_directories(options_.run_dir);
  {
    const fs::path path = fs::path(options_.run_dir) / "config.yaml";
    std::ofstream out(path);
    out << config_yaml;
    if (!out) throw Error(fmt::format("cannot write '{}'", path.string()));
  }
  jsonl_ = std::make_unique<JsonlWriter>((fs::path(options_.run_dir) / "metrics.jsonl").string());
  tensorboard_ = std::make_unique<TensorBoardWriter>(options_.run_dir);
}

RunOutputs::~RunOutputs() = default;

void RunOutputs::begin(int64_t start_step) {
  start_ = std::chrono::steady_clock::now();
  if (!options_.write) return;
  ProgressOptions progress;
  progress.max_steps = options_.max_steps;
  progress.start_step = start_step;
  progress_ = std::make_unique<ProgressLine>(progress);
  if (options_.device.is_cuda()) {
    gpu_monitor_ = std::make_unique<GpuMonitor>(options_.device.index(),
                                                (fs::path(options_.run_dir) / "gpu.jsonl").string(),
                                                GpuMonitor::kDefaultIntervalMs, start_);
    gpu_monitor_->start();
  }
}

double RunOutputs::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void RunOutputs::record(MetricRecord record) {
  record.values[metric::kTimeS] = elapsed_s();
  record.values[metric::kStep] = static_cast<double>(record.step);
  history_.push_back(record);
  if (!options_.write) return;
  jsonl_->write(to_json(record));
  std::map<std::string, double> scalars;
  for (const auto& [name, value] : record.values) {
    if (name != metric::kStep && name != metric::kTimeS && name != metric::kEpoch)
      scalars[name] = value;
  }
  tensorboard_->add_scalars(record.step, scalars, to_string(record.kind));
  if (record.kind == RecordKind::kTrain && progress_) {
    ProgressStats stats;
    stats.step = record.step;
    stats.loss = record.get(metric::kLoss);
    stats.lr = record.get(metric::kLr);
    stats.samples_per_s = record.get(metric::kSamplesPerS);
    if (record.get_or(metric::kTokensPerS, 0.0) > 0)
      stats.tokens_per_s = record.get(metric::kTokensPerS);
    stats.data_wait_pct = record.get(metric::kDataWaitPct);
    progress_->update(stats);
  }
}

void RunOutputs::log(log::Level level, const std::string& message) const {
  if (!options_.write) return;
  if (progress_) {
    progress_->log(level, message);
  } else {
    log::write(level, message);
  }
}

void RunOutputs::warn(const std::string& message) const {
  if (!options_.write) return;
  if (progress_) progress_->finish();
  log(log::Level::kWarn, message);
}

void RunOutputs::profile_before_step(int64_t step) {
  const ProfileOptions& p = options_.profile;
  if (!options_.write || p.steps <= 0 || step != p.start_step || profiler_) return;
  profiler_ = std::make_unique<TraceRecorder>((fs::path(options_.run_dir) / "trace.json").string(),
                                              options_.device);
}

void RunOutputs::profile_after_step(int64_t step_completed) {
  const ProfileOptions& p = options_.profile;
  if (profiler_ && step_completed >= p.start_step + p.steps) {
    profiler_->stop();
    profiler_.reset();
  }
}

std::string RunOutputs::save_checkpoint(
    int64_t step, const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  if (!options_.write) return "";
  return checkpoints_->save(step, fill);
}

std::string RunOutputs::save_best(
    const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  if (!options_.write) return "";
  return checkpoints_->save_best(fill);
}

MetricRecord RunOutputs::finish(const RunFacts& facts) {
  if (progress_) progress_->finish();
  profiler_.reset();
  if (gpu_monitor_) gpu_monitor_->stop();
  MetricRecord s = make_summary(facts);
  history_.push_back(s);
  if (!options_.write) return s;
  jsonl_->write(to_json(s));
  jsonl_->flush();
  tensorboard_->flush();
  std::string gpu;
  if (s.has(metric::kGpuUtilMean)) {
    gpu = fmt::format(", GPU utilisation {:.0f}% (p10 {:.0f}%; {:.0f}% over the whole run)",
                      s.values[metric::kGpuUtilMean], s.values[metric::kGpuUtilP10],
                      s.values[metric::kGpuUtilMeanOverall]);
  }
  log::info("done: {} steps in {:.1f} s, {:.1f} samples/s, data wait {:.1f}%{}", s.step,
            s.values[metric::kTimeS], s.values[metric::kSamplesPerS],
            s.values[metric::kDataWaitPct], gpu);
  for (const auto& f : diagnose(stats_from_records(history_))) log::info("doctor: {}", f.message);
  return s;
}

MetricRecord RunOutputs::make_summary(const RunFacts& facts) const {
  const double elapsed = elapsed_s();
  MetricRecord s;
  s.kind = RecordKind::kSummary;
  s.step = facts.step;
  auto& v = s.values;
  v[metric::kStep] = static_cast<double>(facts.step);
  v[metric::kTimeS] = elapsed;
  // Steady state: the logging windows after the first (which holds start-up: worker start, cuDNN
  // autotuning, allocator growth); with a single window, that one. Rates are their median, the
  // data wait their mean, GPU utilisation the samples inside them; whole-run values are kept
  // beside.
  std::vector<const MetricRecord*> windows;
  for (const auto& r : history_) {
    if (r.kind == RecordKind::kTrain && r.has(metric::kLoss) && r.has(metric::kSamplesPerS))
      windows.push_back(&r);
  }
  double steady_from_s = 0;  // where the steady windows begin: the end of the first window
  if (windows.size() > 1) {
    steady_from_s = windows.front()->get_or(metric::kTimeS, 0.0);
    windows.erase(windows.begin());
  }
  auto median = [&](const char* key) {
    std::vector<double> x;
    for (const MetricRecord* r : windows) x.push_back(r->get_or(key, 0.0));
    if (x.empty()) return 0.0;
    std::nth_element(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(x.size() / 2), x.end());
    return x[x.size() / 2];
  };
  auto mean = [&](const char* key) {
    double sum = 0;
    int64_t n = 0;
    for (const MetricRecord* r : windows) {
      if (auto value = r->get(key)) {
        sum += *value;
        ++n;
      }
    }
    return n ? sum / static_cast<double>(n) : 0.0;
  };
  v[metric::kSamplesPerS] = median(metric::kSamplesPerS);
  v[metric::kTokensPerS] = median(metric::kTokensPerS);
  v[metric::kSamplesPerSOverall] = static_cast<double>(facts.examples_seen) / elapsed;
  v[metric::kTokensPerSOverall] = static_cast<double>(facts.tokens_seen) / elapsed;
  v[metric::kDataWaitPct] = mean(metric::kDataWaitPct);
  v[metric::kHostDataWaitPct] = mean(metric::kHostDataWaitPct);
  v[metric::kNumWorkers] = static_cast<double>(facts.num_workers);
  v[metric::kPinMemory] = facts.pin_memory ? 1.0 : 0.0;
  v[metric::kPrefetchFactor] = static_cast<double>(facts.prefetch_factor);
  v[metric::kBatchSize] = static_cast<double>(facts.batch_size);
  v[metric::kGradAccumSteps] = static_cast<double>(facts.grad_accum_steps);
  v[metric::kHostSyncsPerStep] =
      facts.steps_logged > 0
          ? static_cast<double>(facts.host_syncs) / static_cast<double>(facts.steps_logged)
          : 0.0;
  v[metric::kTensorCores] = facts.tensor_cores ? 1.0 : 0.0;
  s.text = {{metric::kDevice, options_.device.str()},
            {metric::kDeviceName, facts.device_name},
            {metric::kPrecision, facts.precision}};
  if (gpu_monitor_ && gpu_monitor_->available()) {
    const std::vector<GpuSample> samples = gpu_monitor_->samples();
    const GpuSummary whole = summarize_gpu_samples(samples);
    std::vector<GpuSample> steady;
    if (!windows.empty()) {
      const double to = windows.back()->get_or(metric::kTimeS, 0.0);
      for (const auto& g : samples) {
        if (g.t_s >= steady_from_s && g.t_s <= to) steady.push_back(g);
      }
    }
    const GpuSummary g = steady.size() >= 3 ? summarize_gpu_samples(steady) : whole;
    v[metric::kGpuUtilMean] = g.util_mean;
    v[metric::kGpuUtilP10] = g.util_p10;
    v[metric::kGpuUtilMeanOverall] = whole.util_mean;
    v[metric::kGpuUtilP10Overall] = whole.util_p10;
    v[metric::kGpuMemUsedPct] =
        whole.mem_total_mib > 0 ? 100.0 * whole.mem_used_max_mib / whole.mem_total_mib : 0.0;
  }
  if (options_.device.is_cuda()) {
    v[metric::kMemPeakMib] = detail::cuda_peak_memory_mib(options_.device.index());
    v[metric::kMemTotalMib] = detail::cuda_total_memory_mib(options_.device.index());
  }
  return s;
}

}  // namespace brrr
