#include "trainer/trainer.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/ScopeExit.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/checkpoint_io.h"
#include "core/device.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gpu_monitor.h"
#include "core/grad_scaler.h"
#include "core/log.h"
#include "core/precision.h"
#include "data/data_loader.h"
#include "data/dataset_factory.h"
#include "data/normalize.h"
#include "data/prefetcher.h"
#include "models/model.h"
#include "models/registry.h"
#include "trainer/auto_tune.h"
#include "trainer/jsonl_writer.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
#include "trainer/profiler.h"
#include "trainer/progress.h"
#include "trainer/step_timer.h"
#include "trainer/tensorboard_writer.h"

namespace brrr {

namespace fs = std::filesystem;

Trainer::Trainer(ExperimentConfig config) : config_(std::move(config)), device_(c10::kCPU) {
  validate(config_);
  run_dir_ = (fs::path(config_.run.output_dir) / config_.run.name).string();
}

Trainer::~Trainer() = default;

Model& Trainer::model() {
  TORCH_CHECK(model_, "Trainer::model() called before setup()");
  return *model_;
}

Optimizer& Trainer::optimizer() {
  TORCH_CHECK(optimizer_, "Trainer::optimizer() called before setup()");
  return *optimizer_;
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  callbacks_.push_back(std::move(callback));
}

void Trainer::request_stop(const std::string& reason) {
  if (!stop_reason_) stop_reason_ = reason;
}

// ---------------------------------------------------------------------------------------------
// Building blocks (hooks with defaults)
// ---------------------------------------------------------------------------------------------

std::shared_ptr<Model> Trainer::build_model() {
  return make_model(config_.model);
}

DatasetPtr Trainer::build_train_dataset() {
  return make_dataset(config_.data, config_.model);
}

DatasetPtr Trainer::build_val_dataset() {
  if (config_.data.val.dataset.empty()) return nullptr;
  return make_dataset(config_.data.val, config_.model);
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
    it->second = (*normalizer_)(
        it->second, at::kFloat,
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
    const at::Tensor logits = model_->forward(inputs);  // (B, T, V)
    // Cross-entropy in float32 read straight from the bf16/fp16 logits: log_softmax's dtype
    // argument converts while reading, where logits.float() would first write a float32 copy of
    // the (B T, V) logits (1.6 GB for GPT-2 at 8 x 1024) and its backward another cast. Same
    // values as cross_entropy(logits.float()).
    out.loss = at::nll_loss(at::log_softmax(logits.reshape({-1, logits.size(-1)}), 1, at::kFloat),
                            targets.reshape({-1}));
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

void Trainer::setup() {
  if (is_setup_) return;
  device_ = resolve_device(config_.run.device);
  if (config_.run.num_threads > 0) at::set_num_threads(static_cast<int>(config_.run.num_threads));
  precision_ = parse_precision(config_.train.precision);
  const Precision precision = precision_;
  if (device_.is_cuda()) {
    set_tf32(precision != Precision::kFP32);
    // Input shapes are fixed per run (fixed-size batch slots), so cuDNN's autotuner pays off.
    at::globalContext().setBenchmarkCuDNN(true);
  }
  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));

  model_ = build_model();
  TORCH_CHECK(model_, "build_model() returned null");
  model_->to(device_);
  use_channels_last_if_useful();
  params_.clear();
  for (const auto& p : model_->parameters()) {
    if (p.requires_grad()) params_.push_back(p);
  }
  optimizer_ = configure_optimizers();
  schedule_ = make_lr_schedule(config_.schedule, config_.optim.lr, config_.train.max_steps);
  scaler_ =
      std::make_unique<GradScaler>(config_.train.fp16, precision == Precision::kFP16, device_);

  build_data();

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

void Trainer::use_channels_last_if_useful() {
  if (!device_.is_cuda() || !config_.model.channels_last) return;
  torch::NoGradGuard no_grad;
  for (auto& p : model_->parameters()) {
    if (p.dim() != 4) continue;  // conv weights (O, I, kH, kW)
    p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
    channels_last_ = true;
  }
}

void Trainer::build_data() {
  train_set_ = build_train_dataset();
  TORCH_CHECK(train_set_, "build_train_dataset() returned null");
  val_set_ = build_val_dataset();
  auto_tune();
  const DataOptions& d = config_.data;
  auto options = DataLoaderOptions()
                     .batch_size(d.batch_size)
                     .shuffle(d.shuffle)
                     .num_workers(std::max<int64_t>(d.num_workers, 0))
                     .pin_memory(d.pin_memory && device_.is_cuda())
                     .prefetch_factor(d.prefetch_factor)
                     .persistent_workers(d.persistent_workers)
                     .drop_last(d.drop_last)
                     .timeout(d.timeout)
                     .seed(static_cast<uint64_t>(config_.run.seed))
                     .device(device_);
  train_loader_ = std::make_unique<DataLoader>(train_set_, options);
  if (train_loader_->batches_per_epoch() == 0) {
    throw ConfigError(
        fmt::format("data.batch_size: {} with drop_last gives no batch from {} examples ({})",
                    d.batch_size, train_set_->size(), train_set_->describe()));
  }
}

// A batch of `batch_size` copies of example 0 on the device, prepared as a training batch is.
Batch Trainer::probe_batch(int64_t batch_size) {
  Rng rng(0);
  const Sample spec = train_set_->get(0, rng);
  Batch batch;
  for (const auto& [key, value] : spec) {
    std::vector<int64_t> shape = {batch_size};
    shape.insert(shape.end(), value.sizes().begin(), value.sizes().end());
    batch[key] = value.unsqueeze(0).expand(shape).contiguous().to(device_);
  }
  return prepare_batch(std::move(batch));
}

// One forward+backward (no optimizer step, so the weights are untouched). Used by the auto-tuners.
void Trainer::probe_step(const Batch& batch) {
  StepOutput out;
  {
    AutocastGuard autocast(precision_, device_);
    out = training_step(batch);
  }
  scaler_->scale(out.loss).backward();
  optimizer_->zero_grad();
}

void Trainer::auto_tune() {
  DataOptions& d = config_.data;
  auto sync = [this] {
    if (device_.is_cuda())
      c10::impl::VirtualGuardImpl(device_.type()).synchronizeDevice(device_.index());
  };
  if (d.batch_size == 0) {
    if (!device_.is_cuda()) {
      d.batch_size = 64;
      log::info("data.batch_size: auto needs a CUDA device to measure memory; using 64 on {}",
                device_.str());
    } else {
      int64_t param_bytes = 0;
      for (const auto& p : params_) param_bytes += p.numel() * p.element_size();
      int64_t sample_bytes = 0;  // one example as the loader delivers it
      Rng rng(0);
      for (const auto& [key, value] : train_set_->get(0, rng))
        sample_bytes += static_cast<int64_t>(value.nbytes());
      // cuDNN's autotuner would benchmark every convolution again at every trial size (minutes
      // for a ResNet); the heuristic algorithms are enough to see what fits.
      const bool benchmark = at::globalContext().benchmarkCuDNN();
      at::globalContext().setBenchmarkCuDNN(false);
      const auto restore =
          c10::make_scope_exit([benchmark] { at::globalContext().setBenchmarkCuDNN(benchmark); });
      const BatchChoice choice = find_max_batch_size(
          [&](int64_t b) {
            // Room for the optimizer's state (two moments), which the trial does not allocate,
            // and for two more batches: the prefetcher's next one and the previous one, whose
            // memory the allocator frees only once the step that used it is done.
            const at::Tensor reserve = at::empty({2 * param_bytes + 2 * b * sample_bytes},
                                                 at::TensorOptions(at::kByte).device(device_));
            probe_step(probe_batch(b));
            sync();
          },
          8, 4096);
      detail::cuda_empty_cache();
      d.batch_size = choice.batch_size;
      log::info("data.batch_size: auto -> {} ({}, precision {})", d.batch_size, choice.reason,
                config_.train.precision);
    }
  }
  if (d.num_workers < 0) {
    const Batch batch = probe_batch(d.batch_size);
    probe_step(batch);  // warm-up (cuDNN autotuning, allocator)
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    const int kSteps = 3;
    for (int i = 0; i < kSteps; ++i) probe_step(batch);
    sync();
    const double step_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kSteps;
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    const auto choice = choose_num_workers(step_s, std::min<int64_t>(cores, 32), [&](int64_t n) {
      auto options = DataLoaderOptions()
                         .batch_size(d.batch_size)
                         .shuffle(d.shuffle)
                         .num_workers(n)
                         .prefetch_factor(d.prefetch_factor)
                         .drop_last(true)
                         .persistent_workers(true)
                         .pin_memory(d.pin_memory)
                         .device(device_)
                         .seed(config_.run.seed);
      // Two rounds of the ring after the warm-up; at least 8 batches.
      return measure_loader(train_set_, options, std::max<int64_t>(8, 2 * n * d.prefetch_factor));
    });
    std::string table;
    for (const auto& t : choice.trials)
      table += fmt::format(" {}:{:.1f}", t.num_workers, t.batches_per_s);
    log::info("data.num_workers: auto -> {} ({}); measured batches/s by workers:{}",
              choice.num_workers, choice.reason, table);
    d.num_workers = choice.num_workers;
  }
}

std::string Trainer::plan() {
  setup();
  const auto& t = config_.train;
  const auto& d = config_.data;
  std::string s;
  s += fmt::format("run         {} -> {}\n", config_.run.name, run_dir_);
  s += fmt::format("device      {} ({})\n", device_.str(), device_name(device_));
  s += fmt::format("precision   {}\n", t.precision);
  s += fmt::format("model       {}{}\n", model_->describe(),
                   channels_last_ ? " [channels-last]" : "");
  s += fmt::format("data        {}\n", train_set_->describe());
  if (val_set_) s += fmt::format("val         {}\n", val_set_->describe());
  s += fmt::format("batch       {} x {} accumulation = {} examples/step; {} batches/epoch\n",
                   d.batch_size, t.grad_accum_steps, d.batch_size * t.grad_accum_steps,
                   train_loader_->batches_per_epoch());
  s += fmt::format("loader      num_workers {}, pin_memory {}, prefetch_factor {}, persistent {}\n",
                   d.num_workers, d.pin_memory && device_.is_cuda(), d.prefetch_factor,
                   d.persistent_workers);
  s += fmt::format("optimizer   {} lr {} wd {} fused {}; schedule {} (warmup {})\n",
                   config_.optim.name, config_.optim.lr, config_.optim.weight_decay,
                   config_.optim.fused, config_.schedule.name, config_.schedule.warmup_steps);
  s += fmt::format("steps       {} (log every {}, eval every {}, checkpoint every {})\n",
                   t.max_steps, t.log_every, t.eval_every, t.checkpoint_every);
  return s;
}

}  // namespace brrr
