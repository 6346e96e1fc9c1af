#include "trainer/trainer.h"

#include <fmt/ranges.h>
#include <torch/cuda.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/determinism.h"
#include "core/device.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/name_registry.h"
#include "core/ops/batch_norm_act.h"
#include "core/ops/image_input.h"
#include "data/data_loader.h"
#include "data/dataset_factory.h"
#include "data/loader_options.h"
#include "data/prefetcher.h"
#include "data/sampler.h"
#include "models/attention.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "models/weights_file.h"
#include "trainer/dist/dist_context.h"
#include "trainer/dist/dist_env.h"
#include "trainer/dist/grad_sync.h"
#include "trainer/evaluator.h"
#include "trainer/optim/grad_scaler.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizer.h"
#include "trainer/run_outputs.h"
#include "trainer/signals.h"
#include "trainer/step_graph.h"
#include "trainer/step_runner.h"

namespace brrr {

namespace fs = std::filesystem;

namespace detail {

// The virtual hooks of Trainer as the first callback, so every event has one dispatch.
class HookCallback : public Callback {
 public:
  std::string name() const override { return "hooks"; }
  void on_train_start(Trainer& t) override { t.on_train_start(); }
  void on_step_end(Trainer& t, int64_t step) override { t.on_step_end(step); }
  void on_eval_end(Trainer& t, int64_t step, const Metrics& m) override { t.on_eval_end(step, m); }
  void on_train_end(Trainer& t) override { t.on_train_end(); }
};

}  // namespace detail

Trainer::Trainer(ExperimentConfig config) : config_(std::move(config)), device_(c10::kCPU) {
  validate(config_);
  run_dir_ = (fs::path(config_.run.output_dir) / config_.run.name).string();
  callbacks_.push_back(std::make_shared<detail::HookCallback>());
}

Trainer::~Trainer() = default;

Model& Trainer::model() {
  if (!model_) throw Error("Trainer::model() called before setup()");
  return *model_;
}

Optimizer& Trainer::optimizer() {
  if (!optimizer_) throw Error("Trainer::optimizer() called before setup()");
  return *optimizer_;
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  callbacks_.push_back(std::move(callback));
}

void Trainer::notify(const std::function<void(Callback&)>& event) {
  for (auto& cb : callbacks_) event(*cb);
}

void Trainer::request_stop(const std::string& reason) {
  // Data-parallel: the ranks vote after each step, and all stop after the same one.
  std::optional<std::string>& slot = stop_vote_ ? stop_wanted_ : stop_reason_;
  if (!slot) slot = reason;
}

int64_t Trainer::rank() const {
  return dist_ ? dist_->rank() : 0;
}

int64_t Trainer::world_size() const {
  return dist_ ? dist_->world_size() : 1;
}

// ---------------------------------------------------------------------------------------------
// Building blocks (hooks with defaults)
// ---------------------------------------------------------------------------------------------

namespace {

// A name no registry knows, with where the config set it (make_model and make_dataset see the
// options, not the file): "model.name at exp.yaml:2:16: unknown model 'x'; valid names: ...".
void check_name(const ExperimentConfig& config, const std::string& key, const std::string& kind,
                const std::string& name, const std::vector<std::string>& valid) {
  if (std::find(valid.begin(), valid.end(), name) != valid.end()) return;
  throw ConfigError(config_message(config, key, unknown_name_message(kind, name, valid)));
}

}  // namespace

std::shared_ptr<Model> Trainer::build_model() {
  check_name(config_, "model.name", "model", config_.model.name, model_names());
  return make_model(config_.model);
}

DatasetPtr Trainer::build_train_dataset() {
  check_name(config_, "data.dataset", "dataset", config_.data.dataset, dataset_names());
  return make_dataset(config_.data, "data");
}

DatasetPtr Trainer::build_val_dataset() {
  if (config_.data.val.dataset.empty()) return nullptr;
  check_name(config_, "data.val.dataset", "dataset", config_.data.val.dataset, dataset_names());
  return make_dataset(config_.data.val, "data.val");
}

std::unique_ptr<Optimizer> Trainer::configure_optimizers() {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : model_->named_parameters()) {
    if (item.value().requires_grad()) named.emplace_back(item.key(), item.value());
  }
  return make_optimizer(config_.optim, named, device_);
}

Batch Trainer::prepare_batch(Batch batch) {
  auto it = batch.find("image");
  if (it != batch.end() && it->second.scalar_type() == at::kByte) {
    if (!normalizer_)
      normalizer_ = std::make_shared<ImageNormalizer>(config_.data.mean, config_.data.std);
    // Straight into the autocast dtype (bf16/fp16; float32 without autocast): the first conv
    // would cast a float32 batch to it anyway, as one more kernel over twice the bytes. The
    // kernel rounds its float32 result once, as that cast does, so the step is the same bit for
    // bit.
    it->second = (*normalizer_)(
        it->second, autocast_dtype(precision_).value_or(at::kFloat),
        channels_last_ ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  }
  return batch;
}

StepOutput Trainer::training_step(const Batch& batch) {
  StepOutput out;
  if (model_->task() == Task::kLanguageModel) {
    const at::Tensor& tokens = batch.at("tokens");  // (B, T+1)
    const auto inputs = tokens.narrow(1, 0, tokens.size(1) - 1);
    const auto targets = tokens.narrow(1, 1, tokens.size(1) - 1);
    out.loss = model_->language_model_loss(inputs, targets, config_.model.fused != "false");
    out.examples = tokens.size(0);
    out.tokens = inputs.numel();
    return out;
  }
  const at::Tensor& input = batch.count("image") ? batch.at("image") : batch.at("features");
  const at::Tensor& labels = batch.at("label");
  const at::Tensor logits = model_->forward(input);  // (B, classes)
  out.loss = at::cross_entropy_loss(logits.to(at::kFloat), labels);
  out.sums["correct"] = logits.argmax(1).eq(labels).sum();
  out.examples = labels.size(0);
  return out;
}

StepOutput Trainer::validation_step(const Batch& batch) {
  return training_step(batch);
}

// ---------------------------------------------------------------------------------------------
// Setup
// ---------------------------------------------------------------------------------------------

void Trainer::init_weights() {
  const std::string& path = config_.model.init_from;
  TensorMap weights;
  try {
    weights = read_weights_file(path);
  } catch (const Error& e) {
    throw ConfigError(config_message(config_, "model.init_from", e.what()));
  }
  std::string kind = "weights";
  if (config_.model.name == "gpt" && is_hf_gpt2(weights)) {
    weights = from_hf_gpt2(weights, config_.model.vocab_size);
    kind = "Hugging Face GPT-2 weights";
  }
  LoadReport report;
  try {
    report = load_state_dict(*model_, weights, config_.model.init_strict);
  } catch (const Error& e) {
    const bool keys_differ = std::string(e.what()).find("missing key") != std::string::npos;
    throw ConfigError(config_message(
        config_, "model.init_from",
        fmt::format("'{}' does not fit model '{}': {}{}", path, config_.model.name, e.what(),
                    keys_differ ? " (model.init_strict: false loads the keys that match)" : "")));
  }
  log::info("model.init_from: loaded {} tensors of {} from {}",
            weights.size() - report.unexpected.size(), kind, path);
  if (!report.missing.empty()) {
    log::warn("model.init_from: {} model tensors not in the file keep their initialisation: {}",
              report.missing.size(), fmt::join(report.missing, ", "));
  }
  if (!report.unexpected.empty()) {
    log::warn("model.init_from: {} tensors of the file are not in the model and were ignored: {}",
              report.unexpected.size(), fmt::join(report.unexpected, ", "));
  }
}

void Trainer::join_data_parallel() {
  const std::optional<DistEnv> env = read_dist_env();
  if (!env) return;
  if (device_.is_cuda()) {
    // One GPU per rank: the local rank's.
    const std::string& name = config_.run.device;
    if (name.rfind("cuda:", 0) == 0 && env->local_world_size > 1) {
      throw ConfigError(config_message(
          config_, "run.device",
          fmt::format("'{}' puts all {} ranks of this machine on one GPU; use auto or cuda, "
                      "which give rank r the GPU cuda:LOCAL_RANK",
                      name, env->local_world_size)));
    }
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    if (env->local_rank >= count) {
      throw UsageError(fmt::format("LOCAL_RANK={} but this machine has {} visible GPU(s)",
                                   env->local_rank, count));
    }
    device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env->local_rank));
  }
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.run.dist_timeout_s * 1000.0));
  dist_ = std::make_unique<DistContext>(*env, device_, timeout);
  // The other ranks say only what goes wrong; rank 0 speaks for the run.
  if (!dist_->is_main() && log::level() < log::Level::kWarn) log::set_level(log::Level::kWarn);
  log::info("data-parallel: rank {} of {} on {} ({} backend)", dist_->rank(), dist_->world_size(),
            device_.str(), device_.is_cuda() ? "NCCL" : "Gloo");
}

void Trainer::sync_model_across_ranks() {
  if (!dist_) return;
  std::vector<at::Tensor> state;
  for (const auto& p : model_->parameters()) state.push_back(p);
  for (const auto& b : model_->buffers()) state.push_back(b);
  dist_->broadcast_from_rank0(state);
  std::vector<std::string> names;
  for (const auto& item : model_->named_parameters()) {
    if (item.value().requires_grad()) names.push_back(item.key());
  }
  grad_sync_ = std::make_unique<GradSync>(params_, names, dist_->group());
}

void Trainer::setup() {
  if (is_setup_) return;
  device_ = resolve_device(config_.run.device);
  if (!dist_) join_data_parallel();
  if (config_.run.num_threads > 0) at::set_num_threads(static_cast<int>(config_.run.num_threads));
  precision_ = parse_precision(config_.train.precision);
  set_deterministic(config_.train.deterministic);
  if (device_.is_cuda()) {
    set_tf32(precision_ != Precision::kFP32);
    // Input shapes are fixed per run (fixed-size batch slots), so cuDNN's autotuner pays off;
    // its choice rests on timings, so set_deterministic(true) has turned it off.
    if (!config_.train.deterministic) at::globalContext().setBenchmarkCuDNN(true);
  }
  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));

  model_ = build_model();
  if (!model_) throw Error("build_model() returned null");
  if (!config_.model.init_from.empty()) init_weights();
  model_->to(device_);
  use_channels_last_if_useful();
  params_.clear();
  for (const auto& p : model_->parameters()) {
    if (p.requires_grad()) params_.push_back(p);
  }
  sync_model_across_ranks();
  optimizer_ = configure_optimizers();
  scaler_ =
      std::make_unique<GradScaler>(config_.train.fp16, precision_ == Precision::kFP16, device_);
  decide_cuda_graph_mode();

  build_data();
  if (config_.train.max_epochs > 0) resolve_epochs();
  schedule_ = make_lr_schedule(config_.schedule, config_.optim.lr, config_.train.max_steps);

  if (config_.train.ema_decay > 0) add_callback(std::make_shared<Ema>(config_.train.ema_decay));
  const auto& es = config_.train.early_stopping;
  if (es.patience > 0) {
    add_callback(std::make_shared<EarlyStopping>(es.metric, es.mode, es.patience, es.min_delta));
  }
  if (!config_.train.best_metric.empty()) {
    add_callback(
        std::make_shared<BestCheckpoint>(config_.train.best_metric, config_.train.best_mode));
  }
  is_setup_ = true;
}

void Trainer::resolve_epochs() {
  // The loader's epochs and the optimizer's steps need not align: with accumulation, a step's
  // micro-batches may straddle two epochs. The run ends at the last whole step of the last epoch.
  TrainOptions& t = config_.train;
  const int64_t batches = train_loader_->batches_per_epoch();
  steps_per_epoch_ = std::max<int64_t>(1, batches / t.grad_accum_steps);
  t.max_steps = t.max_epochs * steps_per_epoch_;
  if (batches < t.grad_accum_steps) {
    log::warn("{}", config_message(config_, "train.grad_accum_steps",
                                   fmt::format("{} is more than the {} batches of an epoch: one "
                                               "step per epoch spans several epochs",
                                               t.grad_accum_steps, batches)));
  }
}

std::string Trainer::config_yaml() const {
  if (config_.train.max_epochs == 0) return to_yaml(config_);
  ExperimentConfig given = config_;
  given.train.max_steps = 0;
  return to_yaml(given);
}

void Trainer::use_channels_last_if_useful() {
  if (!device_.is_cuda() || !config_.model.channels_last) return;
  torch::NoGradGuard no_grad;
  for (auto& p : model_->parameters()) {
    if (p.dim() != 4) continue;  // conv weights (O, I, kH, kW)
    p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
    channels_last_ = true;
  }
}

void Trainer::check_target_ids(const Dataset& set, const std::string& key) const {
  // Only the stock models are known to size their output from these keys.
  const std::string& model = config_.model.name;
  const bool lm = model == "gpt";
  const bool classifier =
      model == "mlp" || model == "convnet" || model == "resnet18" || model == "resnet50";
  if (!lm && !classifier) return;
  const std::optional<int64_t> max_id = set.max_target_id();
  const int64_t limit = lm ? config_.model.vocab_size : config_.model.num_classes;
  if (!max_id || *max_id < limit) return;
  throw ConfigError(config_message(
      config_, lm ? "model.vocab_size" : "model.num_classes",
      fmt::format("is {}, but {} ({}) holds {} id {}; set it to at least {}", limit, key,
                  set.describe(), lm ? "token" : "class", *max_id, *max_id + 1)));
}

void Trainer::cap_num_workers() {
  // Far more worker processes than cores only thrash (and each holds its own pipeline); PyTorch
  // warns, brrr caps.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int64_t cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const int64_t cap = std::max<int64_t>(2, 2 * cores);
  if (config_.data.num_workers <= cap) return;
  log::warn("{}", config_message(config_, "data.num_workers",
                                 fmt::format("{} is far beyond this machine's {} usable CPU cores; "
                                             "using {} worker processes",
                                             config_.data.num_workers, cores, cap)));
  config_.data.num_workers = cap;
}

void Trainer::build_data() {
  try {
    build_data_and_loaders();
  } catch (const ConfigError& e) {
    // A dataset or loader names the key its data contradicts; the config knows where that key
    // was set.
    if (e.key().empty()) throw;
    throw ConfigError(config_message(config_, e.key(), e.detail()));
  }
}

void Trainer::build_data_and_loaders() {
  train_set_ = build_train_dataset();
  if (!train_set_) throw Error("build_train_dataset() returned null");
  val_set_ = build_val_dataset();
  check_target_ids(*train_set_, "data");
  if (val_set_) check_target_ids(*val_set_, "data.val");
  cap_num_workers();
  auto_tune();
  LoaderPlacement placement;
  placement.device = device_;
  placement.seed = config_.run.seed;
  placement.rank = rank();
  placement.world_size = world_size();
  const DataOptions& d = config_.data;
  // A stop request (SIGINT/SIGTERM) ends a wait for a batch, so a stuck loader cannot hold the
  // run past it. Not when data-parallel: a rank must not leave a step its peers complete (the
  // stop vote ends the run after the step instead; data.timeout bounds a stuck loader).
  const bool alone = !dist_;
  const auto stop_requested = [alone] { return alone && StopSignalGuard::pending() != 0; };
  train_loader_ = std::make_unique<DataLoader>(
      train_set_,
      make_loader_options(d, LoaderRole::kTrain, placement).stop_requested(stop_requested));
  if (train_loader_->batches_per_epoch() == 0) {
    throw ConfigError(
        fmt::format("data.batch_size: {} with drop_last gives no batch from {} examples ({})",
                    d.batch_size, train_set_->size(), train_set_->describe()));
  }
  if (val_set_) {
    DataLoaderOptions eval_options =
        make_loader_options(d, LoaderRole::kEval, placement).stop_requested(stop_requested);
    Evaluator::SumOverRanks sum_over_ranks;
    if (dist_) {
      // Each rank evaluates every world_size-th example, none twice (no padding).
      if (val_set_->size() < dist_->world_size()) {
        throw ConfigError(config_message(
            config_, "data.val",
            fmt::format("holds {} examples, fewer than the {} ranks that share it ({})",
                        val_set_->size(), dist_->world_size(), val_set_->describe())));
      }
      eval_options.rank(0).world_size(1).sampler(std::make_shared<StridedShardSampler>(
          val_set_->size(), dist_->rank(), dist_->world_size()));
      sum_over_ranks = [this](at::Tensor& sums) { dist_->sum(sums); };
    }
    evaluator_ = std::make_unique<Evaluator>(val_set_, std::move(eval_options), precision_,
                                             config_.train.eval_batches, sum_over_ranks);
  }
}

void Trainer::decide_cuda_graph_mode() {
  CudaGraphConditions conditions;
  conditions.setting = config_.train.cuda_graph;
  conditions.device = device_;
  conditions.graphs_built = StepGraph::available();
  conditions.fused_optimizer = optimizer_->fused();
  conditions.data_parallel = dist_ != nullptr;
  conditions.world_size = world_size();
  cuda_graph_ = decide_cuda_graph(conditions);
  if (cuda_graph_.refused) {
    throw ConfigError(
        config_message(config_, "train.cuda_graph",
                       "true, but this run's step cannot be captured: " + cuda_graph_.reason +
                           " (train.cuda_graph: auto runs it eagerly)"));
  }
}

std::string Trainer::ops_plan() const {
  // Which path each op of the step takes: the CUDA kernel (CUDA tensors in a CUDA build), the
  // ATen reference of the fused op, or the unfused ATen composition (model.fused: false).
  const bool fused = config_.model.fused != "false";
  const char* path =
      device_.is_cuda() && detail::image_input_cuda_built() ? "CUDA kernel" : "ATen reference";
  const at::ScalarType compute = autocast_dtype(precision_).value_or(at::kFloat);
  std::vector<std::string> parts;
  if (model_->task() == Task::kLanguageModel) {
    const std::vector<std::string> ops = fused ? model_->fused_ops() : std::vector<std::string>{};
    for (const std::string& op : ops) parts.push_back(fmt::format("{} {}", op, path));
    if (ops.empty()) parts.push_back(fmt::format("classifier {}", fused ? path : "unfused ATen"));
    parts.push_back(fmt::format(
        "attention {}", to_string(resolve_attention_backend(
                            parse_attention_backend(config_.model.attention), device_, compute))));
  } else {
    parts.push_back(fmt::format("image_input {} (uint8 -> {})", path, c10::toString(compute)));
    for (const std::string& op : fused ? model_->fused_ops() : std::vector<std::string>{}) {
      if (op != "batch_norm_act") {
        parts.push_back(fmt::format("{} {}", op, path));
        continue;
      }
      // Its path depends on the activations: cuDNN's for channels-last bf16/fp16 on CUDA.
      const at::Tensor like = at::empty(
          {1, 1, 1, 1}, at::TensorOptions().dtype(compute).device(device_).memory_format(
                            channels_last_ ? at::MemoryFormat::ChannelsLast
                                           : at::MemoryFormat::Contiguous));
      parts.push_back(std::string_view(batch_norm_act_path(like, true)) == "cudnn"
                          ? "batch_norm_act cuDNN fused"
                          : "batch_norm_act ATen reference");
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string Trainer::plan() {
  setup();
  const auto& t = config_.train;
  const auto& d = config_.data;
  std::string s;
  s += fmt::format("run         {} -> {}\n", config_.run.name, run_dir_);
  s += fmt::format("device      {} ({})\n", device_.str(), device_name(device_));
  s += fmt::format("precision   {}{}\n", t.precision,
                   t.deterministic ? "; deterministic algorithms only (train.deterministic)" : "");
  s += fmt::format("model       {}{}\n", model_->describe(),
                   channels_last_ ? " [channels-last]" : "");
  s += fmt::format("ops         {}\n", ops_plan());
  s += fmt::format("data        {}\n", train_set_->describe());
  if (val_set_) s += fmt::format("val         {}\n", val_set_->describe());
  const std::string ranks = dist_ ? fmt::format(" x {} ranks", world_size()) : std::string();
  if (dist_) {
    s += fmt::format("ranks       {} data-parallel ({}), this is rank {}\n", world_size(),
                     device_.is_cuda() ? "NCCL" : "Gloo", rank());
  }
  s += fmt::format("batch       {} x {} accumulation{} = {} examples/step; {} batches/epoch{}\n",
                   d.batch_size, t.grad_accum_steps, ranks,
                   d.batch_size * t.grad_accum_steps * world_size(),
                   train_loader_->batches_per_epoch(), dist_ ? " per rank" : "");
  s += fmt::format("loader      num_workers {}, pin_memory {}, prefetch_factor {}, persistent {}\n",
                   d.num_workers, d.pin_memory && device_.is_cuda(), d.prefetch_factor,
                   d.persistent_workers);
  s += fmt::format("cuda graph  {}\n",
                   cuda_graph_.mode == GraphMode::kOff
                       ? "off: " + cuda_graph_.reason
                       : fmt::format("the whole step, captured after {} eager steps ({})",
                                     kGraphWarmupSteps, config_.train.cuda_graph));
  s += fmt::format("optimizer   {} lr {} wd {} fused {}; schedule {} (warmup {})\n",
                   config_.optim.name, config_.optim.lr, config_.optim.weight_decay,
                   config_.optim.fused, config_.schedule.name, config_.schedule.warmup_steps);
  const std::string epochs =
      t.max_epochs > 0 ? fmt::format(" = {} epochs x {}", t.max_epochs, steps_per_epoch_) : "";
  s += fmt::format("steps       {}{} (log every {}, eval every {}, checkpoint every {})\n",
                   t.max_steps, epochs, t.log_every, t.eval_every, t.checkpoint_every);
  return s;
}

}  // namespace brrr
