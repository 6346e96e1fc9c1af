#pragma once
// The typed experiment configuration. core/config*.cpp is the only code in brrr that parses YAML:
// every component takes one of these options structs and never sees a YAML node.
//
// Invariant: every field below has exactly one entry in the schema table of config.cpp (key, type,
// default, range, doc), and that table drives parsing, `--set`, `--print-config` and validation.
// Add a field here => add it there, or the round-trip test fails.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace brrr {

/// `model.options:` / `data.options:` — the options of a model or dataset registered with
/// brrr::register_model / brrr::register_dataset, whose keys the config schema cannot know. The
/// values are kept as YAML text with the place they were set; a typed read checks the value and
/// names the key and that place like every other key ("model.options.depth at exp.yaml:7:12:
/// expected an integer, got 'four'"). The registry calls check_all_read() after the factory: a
/// key the factory never read (a typo) is an error, not ignored.
class OptionMap {
 public:
  /// One value and where it was set (a file position, or the `--set` text).
  struct Value {
    std::string yaml;  ///< the value as YAML (flow style): `4`, `"x"`, `[1, 2]`
    std::string file;
    int line = 0;
    int column = 0;
    std::string assignment;
  };

  /// `key` is the map's key path for messages ("model.options").
  explicit OptionMap(std::string key = "options") : key_(std::move(key)) {}

  bool empty() const { return values_.empty(); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  /// The names set, in order.
  std::vector<std::string> names() const;

  // Typed reads. Without a fallback the option is required (ConfigError when unset).
  int64_t get_int(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name) const;
  double get_double(const std::string& name, double fallback) const;
  bool get_bool(const std::string& name) const;
  bool get_bool(const std::string& name, bool fallback) const;
  std::string get_string(const std::string& name) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> get_int_list(const std::string& name) const;
  std::vector<int64_t> get_int_list(const std::string& name,
                                    const std::vector<int64_t>& fallback) const;
  std::vector<double> get_double_list(const std::string& name) const;
  std::vector<double> get_double_list(const std::string& name,
                                      const std::vector<double>& fallback) const;

  /// ConfigError naming the first option no get_* has read, where it was set, the closest name
  /// that was read ("did you mean") and `reader` ("model 'tiny_mlp'"), which reads them.
  void check_all_read(const std::string& reader) const;

  /// Sets (or replaces) one option; the config loader's entry point.
  void set(const std::string& name, Value value) { values_[name] = std::move(value); }
  const std::map<std::string, Value>& values() const { return values_; }
  const std::string& key() const { return key_; }
  void set_key(std::string key) { key_ = std::move(key); }

  /// Same names and YAML values (not the places they were set, nor what was read).
  bool operator==(const OptionMap& other) const;
  bool operator!=(const OptionMap& other) const { return !(*this == other); }

 private:
  const Value* find(const std::string& name) const;
  std::string key_;
  std::map<std::string, Value> values_;
  mutable std::set<std::string> read_;
};

/// `run:` — identity and placement of the run.
struct RunOptions {
  /// Run name; the run directory is `<output_dir>/<name>/`.
  std::string name = "run";
  /// Parent folder of run directories.
  std::string output_dir = "runs";
  /// Seed of everything random: init, sample order, augmentation, dropout.
  int64_t seed = 1234;
  /// `auto` (CUDA when available, else CPU), `cpu`, `cuda` or `cuda:N`.
  std::string device = "auto";
  /// Intra-op CPU threads of the trainer process; 0 = libtorch's default (all cores).
  int64_t num_threads = 0;
  /// Starting afresh in a run directory that already holds a run replaces that run (its
  /// metrics, events and checkpoints) instead of refusing.
  bool overwrite = false;
  /// Resuming with a different data.batch_size than the checkpoint's is an error (else a
  /// warning: the data position is then approximate, to within one batch).
  bool strict_resume = false;
  /// Data-parallel runs: how long a rank waits for the others (joining the group, a collective)
  /// before it fails with an error instead of hanging.
  double dist_timeout_s = 300.0;
};

/// `model:` — which model and its hyper-parameters (fields not used by a model are ignored by it).
struct ModelOptions {
  /// Registry name: `mlp`, `convnet`, `resnet18`, `resnet50`, `gpt`. Required.
  std::string name;
  /// Classifier outputs (mlp, convnet, resnet).
  int64_t num_classes = 10;
  /// Input image channels (convnet, resnet; mlp input = in_channels * image_size^2).
  int64_t in_channels = 1;
  /// Input image side in pixels (mlp input size, FLOPs estimate).
  int64_t image_size = 28;
  /// Hidden layer widths (mlp).
  std::vector<int64_t> hidden_sizes = {256, 256};
  /// Conv widths of the successive blocks (convnet).
  std::vector<int64_t> channels = {32, 64};
  /// ResNet stem: `imagenet` (7x7/2 conv + maxpool) or `small` (3x3/1 conv, for 32px inputs).
  std::string stem = "imagenet";
  /// Dropout probability (mlp, convnet, gpt).
  double dropout = 0.0;
  /// GPT: transformer blocks.
  int64_t n_layer = 12;
  /// GPT: attention heads.
  int64_t n_head = 12;
  /// GPT: embedding width.
  int64_t n_embd = 768;
  /// GPT: context length in tokens.
  int64_t block_size = 1024;
  /// GPT: vocabulary size (50304 = GPT-2's 50257 padded to a multiple of 64; 256 for byte-level
  /// text).
  int64_t vocab_size = 50304;
  /// GPT: biases in Linear and LayerNorm layers.
  bool bias = true;
  /// GPT: the output head shares the token embedding matrix.
  bool tie_embeddings = true;
  /// Conv models on CUDA: NHWC (channels-last) weights and inputs, the layout tensor-core
  /// convolutions run fastest in. Ignored on CPU and for models without convolutions.
  bool channels_last = true;
  /// The fused-op path (brrr::ops): `auto` = the fused ops, whose CUDA kernels run on CUDA
  /// tensors and whose ATen reference runs on the CPU; `true` = the same; `false` = the unfused
  /// ATen composition everywhere (the reference path).
  std::string fused = "auto";
  /// gpt: scaled-dot-product attention backend: `auto` (the fastest measured on the device:
  /// cuDNN on Hopper, else ATen's choice), `flash`, `cudnn`, `efficient`, `math`.
  std::string attention = "auto";
  /// gpt on the fused path: rows of logits the head + loss op holds at once (ops::lm_head_loss's
  /// chunk_rows). 0 = all B x T rows; a smaller count takes each chunk's gradients in the forward
  /// and never holds the (B x T, vocab_size) logits, for less peak memory (RESULTS.md, section 8).
  /// Needs the fused path (model.fused auto or true; a config error with false).
  int64_t head_chunk_rows = 0;
  /// Weights to start from (not optimizer state): a safetensors file, a PyTorch
  /// torch.save(model.state_dict()) file or a brrr checkpoint; for `gpt` also a Hugging Face
  /// GPT-2 checkpoint (names and Conv1D layout mapped, vocabulary padded). "" = random init.
  std::string init_from;
  /// With init_from: every model key must be in the file and every file key in the model.
  bool init_strict = true;
  /// Options of a model registered with brrr::register_model (read by its factory).
  OptionMap options{"model.options"};
};

/// One image transform in `data.transforms` (applied in the loader workers, on uint8 images).
struct TransformOptions {
  /// `random_resized_crop`, `random_crop`, `resize`, `center_crop`, `horizontal_flip`.
  std::string name;
  /// Output size [height, width] (crops, resize). A single number means square.
  std::vector<int64_t> size;
  /// random_resized_crop: area fraction range.
  std::vector<double> scale = {0.08, 1.0};
  /// random_resized_crop: aspect ratio range.
  std::vector<double> ratio = {3.0 / 4.0, 4.0 / 3.0};
  /// random_crop: zero padding on each side before cropping.
  int64_t padding = 0;
  /// horizontal_flip: probability.
  double p = 0.5;
};

/// The dataset part shared by `data:` and `data.val:`.
struct DatasetOptions {
  /// `fashion_mnist`, `image_folder`, `token_file`, `csv`. Required in `data:`; empty `val` = no
  /// eval.
  std::string dataset;
  /// File or folder. fashion_mnist: folder with the IDX files (default
  /// /usr/share/datasets/fashion-mnist).
  std::string path;
  /// fashion_mnist: `train` or `test`.
  std::string split = "train";
  /// Micro-batch size per step (per device). 0 means `auto` (largest that fits; see train docs).
  int64_t batch_size = 64;
  /// Image transforms, in order.
  std::vector<TransformOptions> transforms;
  /// Per-channel mean / std of normalisation (applied on the device, after the uint8 copy). Empty =
  /// x/255.
  std::vector<double> mean;
  std::vector<double> std;
  /// token_file: tokens per example (a window holds block_size+1 tokens). 0 = model.block_size.
  int64_t block_size = 0;
  /// token_file: `uint16` or `uint32`.
  std::string token_dtype = "uint16";
  /// token_file: `random` windows (seeded by (seed, epoch, index)) or `sequential` non-overlapping
  /// ones.
  std::string windows = "random";
  /// csv: label column index (negative counts from the end).
  int64_t label_column = -1;
  /// csv: the first row is a header.
  bool header = true;
  /// Use only the first `limit` examples (0 = all).
  int64_t limit = 0;
  /// Options of a dataset registered with brrr::register_dataset (read by its factory).
  OptionMap options{"data.options"};
};

/// `data:` — the training data and its loader (names and meanings as in PyTorch's DataLoader).
struct DataOptions : DatasetOptions {
  /// Worker processes; 0 loads in the trainer process; -1 means `auto` (measured at start).
  int64_t num_workers = 4;
  /// Page-lock the batch ring so host-to-device copies are DMA (only with a CUDA device).
  bool pin_memory = true;
  /// Batches in flight per worker.
  int64_t prefetch_factor = 2;
  /// Keep workers alive across epochs.
  bool persistent_workers = true;
  /// Reshuffle every epoch (seeded by (seed, epoch)).
  bool shuffle = true;
  /// Drop the last incomplete batch.
  bool drop_last = true;
  /// Seconds to wait for one batch before failing; 0 = wait forever (dead workers are still
  /// detected).
  double timeout = 0.0;
  /// A wait for one batch longer than this logs which batch and which worker (pid, process
  /// state) it waits for; 0 = never.
  double stall_warning_s = 30.0;
  /// Validation data; `val.dataset` empty = no evaluation. Unset loader fields follow `data:`.
  DatasetOptions val;
};

/// `optim:` — optimizer.
struct OptimOptions {
  /// `sgd`, `adam`, `adamw`.
  std::string name = "adamw";
  /// Peak learning rate.
  double lr = 3.0e-4;
  /// Decoupled (adamw) or L2 (sgd, adam) weight decay.
  double weight_decay = 0.0;
  /// Adam betas.
  std::vector<double> betas = {0.9, 0.999};
  /// Adam epsilon.
  double eps = 1.0e-8;
  /// SGD momentum.
  double momentum = 0.0;
  /// SGD Nesterov momentum.
  bool nesterov = false;
  /// Fused kernels: `auto` (on CUDA), `true`, `false`.
  std::string fused = "auto";
  /// Put biases and normalisation weights (1-D parameters) in a group without weight decay.
  bool no_decay_1d = true;
};

/// `schedule:` — learning-rate schedule (stepped once per optimizer step).
struct ScheduleOptions {
  /// `constant`, `cosine`, `linear`, `step`, `wsd` (warmup-stable-decay), `plateau`.
  std::string name = "constant";
  /// Linear warm-up steps from 0 to lr.
  int64_t warmup_steps = 0;
  /// cosine/linear/wsd: final lr as a fraction of lr.
  double min_lr_ratio = 0.0;
  /// step: decay every step_size steps by gamma.
  int64_t step_size = 1000;
  double gamma = 0.1;
  /// wsd: fraction of the steps (after warm-up) spent decaying at the end.
  double decay_ratio = 0.2;
  /// plateau: eval metric watched, its mode, patience (evals), factor and threshold.
  std::string metric = "val_loss";
  std::string mode = "min";
  int64_t patience = 3;
  double factor = 0.1;
  double threshold = 1.0e-4;
};

/// `train.early_stopping:`
struct EarlyStoppingOptions {
  /// Evaluations without improvement before stopping; 0 = off.
  int64_t patience = 0;
  std::string metric = "val_loss";
  std::string mode = "min";
  double min_delta = 0.0;
};

/// `train.profile:` — Kineto trace of a window of steps (steps = 0: off).
struct ProfileOptions {
  int64_t start_step = 10;
  int64_t steps = 0;
  /// Also record every allocation and free of the window (Kineto's profile_memory): `[memory]`
  /// events in trace.json, which `scripts/memory_peak.py` turns into what is alive at the peak.
  bool memory = false;
};

/// `train.fp16:` — dynamic loss scaling (used only with precision fp16).
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

/// `train:` — the loop.
struct TrainOptions {
  /// Optimizer steps (each = grad_accum_steps micro-batches). Exactly one of max_steps and
  /// max_epochs is > 0; a config file that sets max_epochs leaves this at 0.
  int64_t max_steps = 1000;
  /// Passes over the training data instead of max_steps: the run takes max_epochs x
  /// floor(batches per epoch / grad_accum_steps) optimizer steps (resolved when the data is
  /// built, at least one per epoch). 0 = use max_steps.
  int64_t max_epochs = 0;
  /// Micro-batches per optimizer step; the effective batch is batch_size * grad_accum_steps.
  int64_t grad_accum_steps = 1;
  /// Global L2 gradient-norm clip after unscaling; 0 = off.
  double max_grad_norm = 1.0;
  /// `fp32`, `tf32`, `bf16`, `fp16`.
  std::string precision = "fp32";
  /// Capture one whole optimizer step in a CUDA graph and replay it: `auto` (on for CUDA runs
  /// whose step can be captured; a step that cannot be runs eagerly with one warning), `true`
  /// (a step that cannot be captured stops the run with its cause), `false`.
  std::string cuda_graph = "auto";
  /// Bitwise-reproducible runs: the same config, seed and device give the same losses and weights
  /// (core/determinism.h). Costs speed where a fast kernel is not reproducible (GPT-2's attention
  /// backward: `model.attention: auto` then takes flash's deterministic variant).
  bool deterministic = false;
  /// Steps between log lines / metric records (the only steps that read values from the GPU).
  int64_t log_every = 10;
  /// Steps between evaluations; 0 = only at the end.
  int64_t eval_every = 0;
  /// Batches per evaluation; 0 = the whole validation set. (Hugging Face's `eval_steps`, the
  /// steps between evaluations, is eval_every here; brrr's old name `train.eval_steps` is an
  /// error that names this one.)
  int64_t eval_batches = 0;
  /// Steps between checkpoints; 0 = only at the end.
  int64_t checkpoint_every = 0;
  /// Step checkpoints kept (oldest deleted first).
  int64_t keep_checkpoints = 3;
  /// Eval metric that selects the `best` checkpoint (empty = none), and whether lower or higher is
  /// better.
  std::string best_metric;
  std::string best_mode = "min";
  /// EMA of the weights with this decay (0 = off); evaluation then uses the EMA weights.
  double ema_decay = 0.0;
  EarlyStoppingOptions early_stopping;
  ProfileOptions profile;
  GradScalerOptions fp16;
};

/// A whole experiment file.
struct ExperimentConfig {
  RunOptions run;
  ModelOptions model;
  DataOptions data;
  OptimOptions optim;
  ScheduleOptions schedule;
  TrainOptions train;
  /// The file it was loaded from ("" when built in code).
  std::string source_path;
  /// Where each key was set: "exp.yaml:4:14" or "--set data.batch_size=64" (keys left at their
  /// default are absent). For errors found after loading, when a value meets the data.
  std::map<std::string, std::string> origins;
};

/// A ConfigError message about `key` of `config`, found after loading (e.g. a value that the
/// data contradicts): "data.batch_size at exp.yaml:4:14: <what>", the --set form, or, for a key
/// left at its default, "<key>: <what> (the default; set it in <file>)".
std::string config_message(const ExperimentConfig& config, const std::string& key,
                           const std::string& what);

/// Loads `path` (following `base:` chains), applies `overrides` ("a.b=value", YAML-typed values),
/// validates, resolves dependent defaults. Throws ConfigError naming key, file:line:column.
ExperimentConfig load_config(const std::string& path,
                             const std::vector<std::string>& overrides = {});

/// Same as load_config on YAML text; `name` is used as the file name in messages; `base:` is
/// resolved relative to `base_dir`.
ExperimentConfig parse_config(const std::string& yaml_text, const std::string& name = "<string>",
                              const std::vector<std::string>& overrides = {},
                              const std::string& base_dir = ".");

/// Applies one "a.b.c=value" override with full validation (ConfigError on unknown key/bad value).
void apply_override(ExperimentConfig& config, const std::string& assignment);

/// Checks ranges and cross-field rules; throws ConfigError naming the key.
void validate(const ExperimentConfig& config);

/// The fully resolved config as YAML; parse_config(to_yaml(c)) == c.
std::string to_yaml(const ExperimentConfig& config);

/// Every valid key path (for `--help`, suggestions, docs), e.g. "train.max_steps". Keys inside the
/// elements of a transform list read "data.transforms[].size".
std::vector<std::string> config_keys();

/// One line per key: path, type, default and doc (for `trainer --help` and the docs).
std::string config_reference();

/// Field-wise equality over every schema key. `source_path` is not compared: it records where a
/// config came from, not what it is. Doubles compare exactly (so a NaN field is never equal).
bool operator==(const ExperimentConfig& a, const ExperimentConfig& b);
bool operator!=(const ExperimentConfig& a, const ExperimentConfig& b);
bool operator==(const TransformOptions& a, const TransformOptions& b);
bool operator!=(const TransformOptions& a, const TransformOptions& b);

}  // namespace brrr
