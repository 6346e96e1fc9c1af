#include "trainer/run_outputs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/checkpoint_io.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gpu_monitor.h"
#include "core/log.h"
#include "core/run_dir_lock.h"
#include "trainer/observe/doctor.h"
#include "trainer/observe/jsonl_writer.h"
#include "trainer/observe/profiler.h"
#include "trainer/observe/progress.h"
#include "trainer/observe/tensorboard_writer.h"

namespace brrr {

namespace fs = std::filesystem;

namespace {

// The files a run writes at the top of its directory (besides checkpoints/).
bool is_run_output(const std::string& name) {
  return name == "metrics.jsonl" || name == "gpu.jsonl" || name == "trace.json" ||
         name == "config.yaml" || name.rfind("events.out.tfevents.", 0) == 0;
}

// What of a run `run_dir` holds, for messages ("" when nothing).
std::string describe_run(const std::string& run_dir, const CheckpointStore& checkpoints) {
  std::vector<std::string> parts;
  std::error_code ec;
  if (fs::file_size(fs::path(run_dir) / "metrics.jsonl", ec) > 0 && !ec)
    parts.push_back("metrics.jsonl");
  int64_t events = 0;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) ++events;
  }
  if (events > 0) parts.push_back(fmt::format("{} TensorBoard event file(s)", events));
  const auto steps = checkpoints.list();
  if (!steps.empty()) {
    parts.push_back(fmt::format("checkpoints up to step {}", steps.back().step));
  }
  if (checkpoints.best()) parts.push_back("best.pt");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// A record's TensorBoard scalars: bookkeeping fields dropped, and evaluation metrics under
// their plain names ("eval/loss", not "eval/val_loss"; metrics.jsonl keeps val_loss, the name
// the config's metric keys use).
std::map<std::string, double> tensorboard_scalars(const MetricRecord& record) {
  std::map<std::string, double> scalars;
  for (const auto& [name, value] : record.values) {
    if (name == metric::kStep || name == metric::kTimeS || name == metric::kEpoch) continue;
    const bool eval_metric = record.kind == RecordKind::kEval && name.rfind("val_", 0) == 0;
    scalars[eval_metric ? name.substr(4) : name] = value;
  }
  return scalars;
}

// The config as a Markdown code block (indented, so no fence can be broken by its text).
std::string markdown_code(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const size_t stop = end == std::string::npos ? text.size() : end;
    out += "    " + text.substr(start, stop - start) + "\n";
    start = stop + 1;
  }
  return out;
}

}  // namespace

RunOutputs::RunOutputs(RunOutputsOptions options, const std::string& config_yaml)
    : options_(std::move(options)), start_(std::chrono::steady_clock::now()) {
  if (options_.write) lock_ = std::make_unique<RunDirLock>(options_.run_dir);
  // Read-only until the start is decided, so that a refused run changes nothing on disk.
  checkpoints_ = std::make_unique<CheckpointStore>(options_.run_dir, options_.keep_checkpoints,
                                                   /*writable=*/false);
  resolve_start();
  if (!options_.write) return;
  checkpoints_ = std::make_unique<CheckpointStore>(options_.run_dir, options_.keep_checkpoints);
  {
    const fs::path path = fs::path(options_.run_dir) / "config.yaml";
    std::ofstream out(path);
    out << config_yaml;
    if (!out) throw Error(fmt::format("cannot write '{}'", path.string()));
  }
  jsonl_ = std::make_unique<JsonlWriter>((fs::path(options_.run_dir) / "metrics.jsonl").string());
  tensorboard_ = std::make_unique<TensorBoardWriter>(options_.run_dir);
  tensorboard_->add_text(0, "config", markdown_code(config_yaml));
}

RunOutputs::~RunOutputs() = default;

void RunOutputs::resolve_start() {
  const std::string& resume = options_.resume;
  if (options_.start_decided) {
    if (!resume.empty()) resume_checkpoint_ = resume;
    return;
  }
  const std::string earlier = describe_run(options_.run_dir, *checkpoints_);
  if (resume == "auto") {
    if (auto latest = checkpoints_->latest()) {
      resume_checkpoint_ = std::move(latest);
      return;
    }
    const auto files = checkpoints_->list();
    if (!files.empty()) {
      throw CheckpointError(fmt::format(
          "--resume auto: none of the {} checkpoints in '{}' is valid (each is named above with "
          "what is wrong); resume from a file with --resume PATH, or start afresh under another "
          "run.name",
          files.size(), checkpoints_->dir()));
    }
    if (earlier.empty()) {
      log::info("--resume auto: '{}' holds no checkpoint yet; starting afresh", options_.run_dir);
    } else {
      // The earlier run never wrote a checkpoint: nothing can continue it, and its records
      // would interleave with this run's.
      log::warn(
          "--resume auto: '{}' holds no checkpoint ({} without one); starting afresh and "
          "replacing that earlier run's outputs",
          options_.run_dir, earlier);
      if (options_.write) remove_earlier_run();
    }
    return;
  }
  if (!resume.empty()) {
    if (!fs::is_regular_file(resume)) {  // names a directory or a missing file as such
      CheckpointStore::load(resume, [](torch::serialize::InputArchive&) {});
    }
    // Continuing this run from one of its own checkpoints is one lineage only if no later step
    // checkpoint exists: the resumed run would write over those.
    const fs::path own_dir = fs::weakly_canonical(checkpoints_->dir());
    const fs::path file = fs::weakly_canonical(resume);
    if (file.parent_path() == own_dir) {
      int64_t from_step = -1;
      for (const auto& f : checkpoints_->list()) {
        if (fs::weakly_canonical(f.path) == file) from_step = f.step;
      }
      const auto files = checkpoints_->list();
      if (from_step >= 0 && !files.empty() && files.back().step > from_step) {
        if (options_.overwrite) {
          log::warn(
              "run.overwrite: resuming '{}' from step {} deletes its later checkpoints (up "
              "to step {})",
              options_.run_dir, from_step, files.back().step);
          for (const auto& f : files) {
            std::error_code rm;
            if (f.step > from_step && options_.write) fs::remove(f.path, rm);
          }
          resume_checkpoint_ = resume;
          return;
        }
        throw RunDirError(fmt::format(
            "--resume {}: run '{}' has checkpoints after step {} (up to step {}) that the resumed "
            "run would overwrite; resume into a new run (--set run.name=...) or with "
            "run.overwrite: true to drop the later ones",
            resume, options_.run_dir, from_step, files.back().step));
      }
      resume_checkpoint_ = resume;
      return;
    }
    resume_checkpoint_ = resume;  // another run's checkpoint starts this one: the rules below
  }
  if (earlier.empty()) return;
  if (!options_.overwrite) {
    throw RunDirError(fmt::format(
        "run directory '{}' already holds a run ({}); continue it with --resume auto, replace it "
        "with run.overwrite: true, or choose another run.name",
        options_.run_dir, earlier));
  }
  log::warn("run.overwrite: replacing the earlier run in '{}' ({})", options_.run_dir, earlier);
  if (options_.write) remove_earlier_run();
}

void RunOutputs::remove_earlier_run() const {
  // File by file (checkpoints/ is flat), not std::filesystem::remove_all: see tests/test_fs.h
  // for why brrr's code does not call it.
  std::vector<fs::path> doomed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints_->dir(), ec)) {
    if (entry.is_regular_file()) doomed.push_back(entry.path());
  }
  for (const auto& entry : fs::directory_iterator(options_.run_dir, ec)) {
    if (entry.is_regular_file() && is_run_output(entry.path().filename().string())) {
      doomed.push_back(entry.path());
    }
  }
  for (const fs::path& path : doomed) {
    std::error_code rm;
    fs::remove(path, rm);
    if (rm) {
      throw Error(
          fmt::format("cannot remove the earlier run's '{}': {}", path.string(), rm.message()));
    }
  }
}

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
  tensorboard_->add_scalars(record.step, tensorboard_scalars(record), to_string(record.kind));
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
                                              options_.device, p.memory);
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
  v[metric::kSamplesPerSOverall] = static_cast<double>(facts.examples_seen) / elapsed;
  if (facts.tokens_seen > 0) {
    v[metric::kTokensPerS] = median(metric::kTokensPerS);
    v[metric::kTokensPerSOverall] = static_cast<double>(facts.tokens_seen) / elapsed;
  }
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
            {metric::kPrecision, facts.precision},
            {metric::kCudaGraph, facts.cuda_graph}};
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
