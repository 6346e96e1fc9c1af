#pragma once
// brrr::Trainer — the training loop. Built from an ExperimentConfig; C++ users subclass it and
// override hooks (training_step, validation_step, build_model, build_train_dataset, ...) without
// copying the loop.
//
// The loop is made of parts with one job each: a StepRunner takes one optimizer step (no I/O, no
// sync), an Evaluator runs the validation set, RunOutputs writes and shows everything (created by
// fit() and destroyed with it), TrainCounters is what a checkpoint says about progress, and the
// virtual hooks below are the first Callback of the callback list (one dispatch for both).
//
// Invariants of fit():
//  * No host-device sync outside logging/eval/checkpoint steps: losses, grad norms and the
//    non-finite flag are accumulated on the device and read only when a log line is written.
//  * The checkpoint holds everything the next step depends on (weights, optimizer, schedule,
//    scaler, RNG, loader position, counters, callbacks), so resume reproduces the run bit for bit.
//
// Data-parallel (started by torchrun or `trainer --nproc-per-node N`, see trainer/dist/): every
// rank runs this same loop on its shard of the data with data.batch_size examples per
// micro-batch; the gradients are all-reduced during backward, metrics are averaged over the
// ranks, rank 0 alone writes the run's outputs and checkpoints, and a stop (a signal, a
// callback's request_stop) takes effect on all ranks after the same step. Its checkpoints do
// not depend on the number of ranks.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/precision.h"
#include "data/dataset.h"
#include "trainer/callbacks.h"
#include "trainer/cuda_graph_policy.h"
#include "trainer/observe/metric_record.h"
#include "trainer/step_output.h"
#include "trainer/train_counters.h"

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
class Evaluator;
class ImageNormalizer;
class RunOutputs;
class StepRunner;
class StepTimer;
class DistContext;
class GradSync;
class StopVote;
struct FetchedBatch;
struct RunFacts;
struct WindowAccumulators;
namespace detail {
class HookCallback;
}

class Trainer {
 public:
  explicit Trainer(ExperimentConfig config);
  virtual ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains to train.max_steps (or until a callback or signal stops it). `resume`: "" (fresh;
  /// refused with RunDirError if the run directory already holds a run, unless run.overwrite),
  /// "auto" (the newest valid checkpoint of this run; afresh if it never wrote one; an error if
  /// none of its checkpoints is valid) or a checkpoint path.
  void fit(const std::string& resume = "");
  /// Runs the validation set (train.eval_batches batches, or all) and returns val_* metrics.
  Metrics evaluate();
  /// Loads checkpoint `path` (weights, optimizer, schedule, RNG, counters) into the set-up
  /// trainer, e.g. before evaluate(). CheckpointError naming the file when it does not load.
  void load_checkpoint(const std::string& path);
  /// Builds model, data and optimizer without training (what --dry-run prints). Idempotent.
  void setup();
  /// A human-readable plan: device, precision, model size, batch/accumulation, loader settings.
  std::string plan();

  void add_callback(std::shared_ptr<Callback> callback);
  /// Asks fit() to stop after the current step (a checkpoint is written).
  void request_stop(const std::string& reason);
  /// Writes a checkpoint now (`best` = the best-metric slot). Only during fit().
  void save_checkpoint(bool best = false);

  const ExperimentConfig& config() const { return config_; }
  c10::Device device() const { return device_; }
  Model& model();
  Optimizer& optimizer();
  /// Optimizer steps completed.
  int64_t step() const { return counters_.step; }
  const TrainCounters& counters() const { return counters_; }
  const std::string& run_dir() const { return run_dir_; }
  /// This process's data-parallel rank and the number of ranks (0 and 1 when alone). Known
  /// after setup().
  int64_t rank() const;
  int64_t world_size() const;
  /// Every metric record of the last fit() (train windows, evaluations, the summary).
  const std::vector<MetricRecord>& history() const { return history_; }

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
  /// Host batch → device batch preparation after the copy (default: uint8 images normalised on
  /// the device into the autocast dtype of train.precision, float32 for fp32/tf32, channels-last
  /// for conv models on CUDA; everything else unchanged).
  virtual Batch prepare_batch(Batch batch);
  virtual void on_train_start() {}
  virtual void on_step_end(int64_t /*step*/) {}
  virtual void on_eval_end(int64_t /*step*/, const Metrics& /*metrics*/) {}
  virtual void on_train_end() {}

 private:
  friend class detail::HookCallback;

  void build_data();
  /// Joins the data-parallel group when the environment says this is a distributed launch
  /// (device_ becomes cuda:LOCAL_RANK on CUDA).
  void join_data_parallel();
  /// Rank 0's model state on every rank, and the gradient all-reduce over the parameters.
  void sync_model_across_ranks();
  /// Creates the RunOutputs of fit(): rank 0 decides where the run starts, the others follow.
  void open_outputs(const std::string& resume);
  /// Data-parallel: when the ranks `agreed` to stop, stops after this step (this rank's reason,
  /// or that another rank asked).
  void adopt_stop_if(bool agreed);
  /// Conv weights to NHWC on CUDA when model.channels_last (tensor-core convolutions want it).
  void use_channels_last_if_useful();
  // train.max_epochs -> train.max_steps, once the train loader knows its batches per epoch.
  void resolve_epochs();
  // The config as given (max_steps 0 when counted in epochs), which parse_config reads back.
  std::string config_yaml() const;
  /// Which path each fused op takes, for plan() (--dry-run).
  std::string ops_plan() const;
  /// train.cuda_graph for this run (ConfigError when `true` cannot be honoured).
  void decide_cuda_graph_mode();
  /// Resolves data.batch_size: auto and data.num_workers: auto by measuring (see auto_tune.h).
  void auto_tune();
  Batch probe_batch(int64_t batch_size);
  void probe_step(const Batch& batch);
  /// The next training micro-batch, crossing epoch boundaries (counters_ track the position).
  FetchedBatch next_train_batch();
  /// ConfigError when `set` holds a class/token id the model has no output for.
  void check_target_ids(const Dataset& set, const std::string& key) const;
  /// Copies model.init_from's weights into the model (ConfigError naming the key on a mismatch).
  void init_weights();
  /// build_data()'s body: datasets, checks, auto-tuning, loaders.
  void build_data_and_loaders();
  /// Caps data.num_workers at twice the usable cores, with a warning.
  void cap_num_workers();
  /// One optimizer step; false when a stop request ended it while it waited for data (the state
  /// is put back to the step's start and checkpointed).
  bool run_step_or_stop(StepRunner& runner, const std::function<FetchedBatch()>& next_batch,
                        WindowAccumulators& window, StepTimer& timer, bool log_after);
  void log_window(WindowAccumulators& window, StepTimer& timer, int64_t syncs);
  /// The message of a data-parallel step that failed with `what` (a peer gone or too slow).
  std::string collective_failure(const std::string& what) const;
  /// What the summary record says about this run.
  RunFacts run_facts(int64_t host_syncs, int64_t steps_logged) const;
  void evaluate_and_record();
  void save_state(torch::serialize::OutputArchive& archive);
  void load_state(torch::serialize::InputArchive& archive);
  /// A checkpoint written with another data.batch_size: converts the data position (warning) or,
  /// with run.strict_resume, refuses.
  void check_data_position(const std::string& saved_yaml, int64_t saved_world_size);
  /// Loads the checkpoint at `path` (model, optimizer, schedule, scaler, RNG, callbacks, counters).
  void resume_from(const std::string& path);
  /// Calls `event` on every callback, the hooks first: the one dispatch of every event.
  void notify(const std::function<void(Callback&)>& event);

  ExperimentConfig config_;
  c10::Device device_;
  std::string run_dir_;
  bool is_setup_ = false;

  // Built by setup(), for the lifetime of the trainer.
  std::shared_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<GradScaler> scaler_;
  std::vector<at::Tensor> params_;               // trainable parameters, in model order
  std::shared_ptr<ImageNormalizer> normalizer_;  // device-resident mean/std of data.mean/std
  int64_t steps_per_epoch_ = 0;                  // with train.max_epochs
  bool channels_last_ = false;                   // NHWC weights and images (conv models on CUDA)
  Precision precision_ = Precision::kFP32;       // train.precision, parsed once in setup()
  CudaGraphDecision cuda_graph_;                 // train.cuda_graph, decided once in setup()
  DatasetPtr train_set_, val_set_;
  std::unique_ptr<DataLoader> train_loader_;
  std::unique_ptr<Evaluator> evaluator_;
  std::vector<std::shared_ptr<Callback>> callbacks_;  // the hooks first
  std::unique_ptr<DistContext> dist_;                 // data-parallel runs only
  std::unique_ptr<GradSync> grad_sync_;               // data-parallel runs only

  // State of the run (checkpointed).
  TrainCounters counters_;

  // Alive during fit() only.
  std::unique_ptr<RunOutputs> outputs_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::optional<std::string> stop_reason_;
  std::optional<std::string> stop_wanted_;  // data-parallel: asked here, not yet agreed
  std::unique_ptr<StopVote> stop_vote_;     // data-parallel
  std::string last_checkpoint_;
  std::string cuda_graph_outcome_;  // for the summary: "captured", or why the step ran eagerly
  std::vector<MetricRecord> history_;
};

}  // namespace brrr
