#pragma once
// brrr::Trainer — the training loop. Built from an ExperimentConfig; C++ users subclass it and
// override hooks (training_step, validation_step, build_model, build_train_dataset, ...) without
// copying the loop.
//
// Invariants of fit():
//  * No host-device sync outside logging/eval/checkpoint steps: losses, grad norms and the
//    non-finite flag are accumulated on the device and read only when a log line is written.
//  * Gradients accumulate over grad_accum_steps micro-batches with the loss divided by
//    grad_accum_steps, so N micro-batches of B/N give the update of one batch of B.
//  * The checkpoint holds everything the next step depends on (weights, optimizer, schedule,
//    scaler, RNG, loader position, counters, callbacks), so resume reproduces the run bit for bit.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/precision.h"
#include "data/dataset.h"
#include "trainer/callbacks.h"

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace brrr {

class Model;
class Optimizer;
class LrSchedule;
class GradScaler;
class DataLoader;
class Prefetcher;
class CheckpointStore;
class StepTimer;
class JsonlWriter;
class TensorBoardWriter;
class ProgressLine;
class GpuMonitor;
class TraceRecorder;
class ImageNormalizer;

/// What a training/validation step returns.
struct StepOutput {
  /// Mean loss over the micro-batch, 0-dim, attached to the graph in training.
  at::Tensor loss;
  /// Named 0-dim tensors summed over the batch (e.g. "correct"); evaluate() divides by examples.
  std::map<std::string, at::Tensor> sums;
  /// Examples in the batch (for averaging) and tokens (for tokens/s; 0 if not a language model).
  int64_t examples = 0;
  int64_t tokens = 0;
};

class Trainer {
 public:
  explicit Trainer(ExperimentConfig config);
  virtual ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains to train.max_steps (or until a callback or signal stops it). `resume`: "" (fresh),
  /// "auto" (newest checkpoint of this run, if any) or a checkpoint path.
  void fit(const std::string& resume = "");
  /// Runs the validation set (train.eval_steps batches, or all) and returns val_* metrics.
  Metrics evaluate();
  /// Builds model, data and optimizer without training (what --dry-run prints). Idempotent.
  void setup();
  /// A human-readable plan: device, precision, model size, batch/accumulation, loader settings.
  std::string plan();

  void add_callback(std::shared_ptr<Callback> callback);
  /// Asks fit() to stop after the current step (a checkpoint is written).
  void request_stop(const std::string& reason);
  /// Writes a checkpoint now (`best` = the best-metric slot).
  void save_checkpoint(bool best = false);

  const ExperimentConfig& config() const { return config_; }
  c10::Device device() const { return device_; }
  Model& model();
  Optimizer& optimizer();
  int64_t step() const { return step_; }
  const std::string& run_dir() const { return run_dir_; }
  /// Every metric record of the run so far (train/eval), as written to metrics.jsonl.
  const std::vector<Metrics>& history() const { return history_; }

 protected:
  // ---- hooks a subclass overrides ----
  /// Loss (and summed metrics) of one micro-batch already on the device. Runs under autocast.
  virtual StepOutput training_step(const Batch& batch);
  /// Same for evaluation (no grad). Default: training_step's computation plus "correct" counts.
  virtual StepOutput validation_step(const Batch& batch);
  virtual std::shared_ptr<Model> build_model();
  virtual DatasetPtr build_train_dataset();
  /// nullptr = no evaluation.
  virtual DatasetPtr build_val_dataset();
  virtual std::unique_ptr<Optimizer> configure_optimizers();
  /// Host batch → device batch preparation after the copy (default: uint8 images normalised to
  /// float on the device; everything else unchanged).
  virtual Batch prepare_batch(Batch batch);
  virtual void on_train_start() {}
  virtual void on_step_end(int64_t /*step*/) {}
  virtual void on_eval_end(int64_t /*step*/, const Metrics& /*metrics*/) {}
  virtual void on_train_end() {}

 private:
  struct LogWindow;
  void build_data();
  /// Conv weights to NHWC on CUDA when model.channels_last (tensor-core convolutions want it).
  void use_channels_last_if_useful();
  /// Resolves data.batch_size: auto and data.num_workers: auto by measuring (see auto_tune.h).
  void auto_tune();
  Batch probe_batch(int64_t batch_size);
  void probe_step(const Batch& batch);
  std::optional<Batch> next_train_batch(double* wait_seconds);
  void train_one_step(LogWindow& window);
  void log_step(LogWindow& window);
  void run_eval_and_callbacks();
  void write_record(const Metrics& record, const std::string& kind);
  void write_summary();
  void save_state(torch::serialize::OutputArchive& archive);
  void load_state(torch::serialize::InputArchive& archive);
  void resume_from(const std::string& resume);
  void start_profiler_if_due();
  void stop_profiler_if_due();

  ExperimentConfig config_;
  c10::Device device_;
  std::string run_dir_;
  bool is_setup_ = false;

  std::shared_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<GradScaler> scaler_;
  std::vector<at::Tensor> params_;               // trainable parameters, in model order
  std::shared_ptr<ImageNormalizer> normalizer_;  // device-resident mean/std of data.mean/std
  bool channels_last_ = false;                   // NHWC weights and images (conv models on CUDA)
  Precision precision_ = Precision::kFP32;       // train.precision, parsed once in setup()

  DatasetPtr train_set_, val_set_;
  std::unique_ptr<DataLoader> train_loader_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::unique_ptr<StepTimer> timer_;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<ProgressLine> progress_;
  std::unique_ptr<GpuMonitor> gpu_monitor_;
  std::vector<std::shared_ptr<Callback>> callbacks_;

  // Counters (checkpointed).
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t batches_in_epoch_ = 0;  // micro-batches of epoch_ handed to the loop
  int64_t examples_seen_ = 0;
  int64_t tokens_seen_ = 0;

  std::optional<std::string> stop_reason_;
  std::string last_checkpoint_;
  int64_t host_syncs_ = 0;    // deliberate reads of device values (logging, eval, checkpoints)
  int64_t window_syncs_ = 0;  // syncs counted by SyncCounter on non-logging work this window
  int64_t total_syncs_ = 0;
  int64_t total_steps_logged_ = 0;
  std::chrono::steady_clock::time_point start_time_;
  std::unique_ptr<TraceRecorder> profiler_;
  std::unique_ptr<DataLoader> val_loader_;
  std::vector<Metrics> history_;
};

}  // namespace brrr
