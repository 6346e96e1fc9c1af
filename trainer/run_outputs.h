#pragma once
// RunOutputs: everything a training run writes or shows — config.yaml, metrics.jsonl, TensorBoard
// events, the console progress line, the GPU monitor (gpu.jsonl), the profiler window
// (trace.json), checkpoints, the end-of-run summary and the doctor's findings. Created by
// Trainer::fit() and destroyed with it.
//
// Invariant: with `write` off (a data-parallel rank other than 0, or a test) it writes nothing —
// no file, no directory, no console line — while still keeping the records in memory and reading
// checkpoints, so the code that calls it never asks which rank it is on.
//
// Invariant: two trainers never write one run directory (an exclusive lock, held for the life of
// the RunOutputs), and a run never writes over another run's files: starting afresh in a
// directory that holds a run is refused unless `overwrite` replaces it, and a resume continues
// exactly one lineage of checkpoints.
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "trainer/observe/metric_record.h"

namespace torch::serialize {
class OutputArchive;
}  // namespace torch::serialize

namespace brrr {

class CheckpointStore;
class GpuMonitor;
class JsonlWriter;
class ProgressLine;
class RunDirLock;
class TensorBoardWriter;
class TraceRecorder;
struct ProgressStats;

struct RunOutputsOptions {
  /// <output_dir>/<name>.
  std::string run_dir;
  /// Off: write and show nothing (see the invariant above).
  bool write = true;
  c10::Device device = c10::Device(c10::kCPU);
  /// For the progress line and ETA.
  int64_t max_steps = 0;
  /// Step checkpoints kept (train.keep_checkpoints).
  int64_t keep_checkpoints = 3;
  /// train.profile: the window of steps traced to trace.json.
  ProfileOptions profile;
  /// "" starts afresh, "auto" continues from the run's newest valid checkpoint, anything else
  /// is a checkpoint file to start from (see resume_checkpoint()).
  std::string resume;
  /// run.overwrite: starting afresh replaces an earlier run in run_dir instead of refusing.
  bool overwrite = false;
  /// `resume` is a decision already taken (by data-parallel rank 0, which alone writes): the
  /// checkpoint to start from, or "" for afresh. Nothing is checked or resolved again.
  bool start_decided = false;
};

/// What the summary record says about the run beyond its records.
struct RunFacts {
  int64_t step = 0;
  int64_t examples_seen = 0;  // by this process
  int64_t tokens_seen = 0;
  int64_t num_workers = 0;
  bool pin_memory = false;  // page-locked ring actually used
  int64_t prefetch_factor = 0;
  int64_t batch_size = 0;
  int64_t grad_accum_steps = 0;
  bool tensor_cores = false;
  /// Host syncs counted outside logging, over the steps of every logging window.
  int64_t host_syncs = 0;
  int64_t steps_logged = 0;
  std::string device_name;
  std::string precision;
  /// train.cuda_graph's outcome: "captured", or "off: <why the step ran eagerly>".
  std::string cuda_graph;
};

class RunOutputs {
 public:
  /// Creates and locks the run directory, decides where the run starts (options.resume), writes
  /// config.yaml (`config_yaml`), opens the writers and the checkpoint store. Throws RunDirError
  /// when the directory is held by another trainer (naming its pid) or holds a run that this one
  /// would overwrite, CheckpointError when `resume` names no valid checkpoint, Error naming a
  /// path that cannot be written.
  RunOutputs(RunOutputsOptions options, const std::string& config_yaml);
  ~RunOutputs();
  RunOutputs(const RunOutputs&) = delete;
  RunOutputs& operator=(const RunOutputs&) = delete;

  /// Starts the clock of the run, the progress line (from `start_step`, after a resume) and the
  /// GPU monitor.
  void begin(int64_t start_step);
  /// Seconds since begin().
  double elapsed_s() const;

  /// Keeps `record` (its time_s set to elapsed_s()) and writes it to metrics.jsonl and
  /// TensorBoard; a train record also updates the progress line.
  void record(MetricRecord record);
  /// A log line that does not tear the progress line.
  void log(log::Level level, const std::string& message) const;
  /// Every record so far, in order.
  const std::vector<MetricRecord>& history() const { return history_; }

  /// Starts or stops the trace window of train.profile around step `step` (0-based, about to
  /// run / just completed).
  void profile_before_step(int64_t step);
  void profile_after_step(int64_t step_completed);

  /// The checkpoint the run continues from (the resolved options.resume), or nullopt for a run
  /// that starts afresh.
  const std::optional<std::string>& resume_checkpoint() const { return resume_checkpoint_; }
  /// The run's checkpoints (read-only when not writing).
  const CheckpointStore& checkpoints() const { return *checkpoints_; }
  /// Writes step checkpoint `step` (or best.pt) from `fill`; returns its path, "" when not writing.
  std::string save_checkpoint(int64_t step,
                              const std::function<void(torch::serialize::OutputArchive&)>& fill);
  std::string save_best(const std::function<void(torch::serialize::OutputArchive&)>& fill);

  /// Ends the run: stops the profiler and GPU monitor, writes the summary record (steady-state
  /// rates and GPU utilisation over the windows after the first), the end-of-run line and the
  /// doctor's findings (from the records in memory). Returns the summary.
  MetricRecord finish(const RunFacts& facts);
  /// Leaves the progress line and prints `message` as a warning (a stopped run).
  void warn(const std::string& message) const;

 private:
  MetricRecord make_summary(const RunFacts& facts) const;
  void resolve_start();
  void remove_earlier_run() const;

  RunOutputsOptions options_;
  std::unique_ptr<RunDirLock> lock_;
  std::optional<std::string> resume_checkpoint_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<ProgressLine> progress_;
  std::unique_ptr<GpuMonitor> gpu_monitor_;
  std::unique_ptr<TraceRecorder> profiler_;
  std::vector<MetricRecord> history_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace brrr
