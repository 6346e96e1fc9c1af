// Trainer: evaluation, metric records, checkpoints and resume.
#include <algorithm>
#include <filesystem>

#include "core/checkpoint_io.h"
#include "core/device.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gpu_monitor.h"
#include "core/grad_scaler.h"
#include "core/json_lines.h"
#include "core/log.h"
#include "core/precision.h"
#include "core/rng_state.h"
#include "data/data_loader.h"
#include "data/prefetcher.h"
#include "models/model.h"
#include "trainer/doctor.h"
#include "trainer/jsonl_writer.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
#include "trainer/profiler.h"
#include "trainer/progress.h"
#include "trainer/tensorboard_writer.h"
#include "trainer/trainer.h"

namespace brrr {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

Metrics Trainer::evaluate() {
  setup();
  if (!val_set_) return {};
  const DataOptions& d = config_.data;
  if (!val_loader_) {
    auto options = DataLoaderOptions()
                       .batch_size(d.val.batch_size)
                       .shuffle(false)
                       .drop_last(false)
                       .num_workers(std::max<int64_t>(d.num_workers, 0))
                       .pin_memory(d.pin_memory && device_.is_cuda())
                       .prefetch_factor(d.prefetch_factor)
                       .persistent_workers(true)
                       .timeout(d.timeout)
                       .seed(static_cast<uint64_t>(config_.run.seed))
                       .device(device_);
    val_loader_ = std::make_unique<DataLoader>(val_set_, options);
  }
  for (auto& cb : callbacks_) cb->on_eval_begin(*this);
  const bool was_training = model_->is_training();
  model_->eval();
  const auto opts = at::TensorOptions().device(device_).dtype(at::kDouble);
  at::Tensor loss_sum = at::zeros({}, opts);
  std::map<std::string, at::Tensor> sums;
  int64_t examples = 0;
  int64_t batches = 0;
  {
    torch::NoGradGuard no_grad;
    val_loader_->start_epoch(0, 0);
    Prefetcher prefetcher(*val_loader_, device_);
    while (auto host_batch = prefetcher.next()) {
      const Batch batch = prepare_batch(std::move(*host_batch));
      StepOutput out;
      {
        AutocastGuard autocast(precision_, device_);
        out = validation_step(batch);
      }
      loss_sum.add_(out.loss.detach().to(at::kDouble), static_cast<double>(out.examples));
      for (const auto& [name, value] : out.sums) {
        auto it = sums.find(name);
        if (it == sums.end()) {
          sums.emplace(name, value.detach().to(at::kDouble).clone());
        } else {
          it->second.add_(value.detach().to(at::kDouble));
        }
      }
      examples += out.examples;
      if (config_.train.eval_steps > 0 && ++batches >= config_.train.eval_steps) break;
    }
  }
  if (was_training) model_->train();
  TORCH_CHECK(examples > 0, "evaluation saw no examples (", val_set_->describe(), ")");

  // One read of every accumulated value.
  std::vector<std::string> names = {"loss"};
  std::vector<at::Tensor> parts = {loss_sum.reshape({1})};
  for (const auto& [name, value] : sums) {
    names.push_back(name);
    parts.push_back(value.reshape({1}));
  }
  const at::Tensor host = at::cat(parts).to(at::kCPU);
  ++host_syncs_;
  Metrics metrics;
  const double n = static_cast<double>(examples);
  for (size_t i = 0; i < names.size(); ++i) {
    const double value = host[static_cast<int64_t>(i)].item<double>() / n;
    metrics[names[i] == "correct" ? "val_accuracy" : "val_" + names[i]] = value;
  }
  if (model_->task() == Task::kLanguageModel) metrics["val_ppl"] = std::exp(metrics["val_loss"]);
  on_eval_end(step_, metrics);
  for (auto& cb : callbacks_) cb->on_eval_end(*this, step_, metrics);
  return metrics;
}

void Trainer::run_eval_and_callbacks() {
  Metrics metrics = evaluate();
  const std::string& watched = config_.schedule.metric;
  if (metrics.count(watched)) schedule_->on_eval(metrics.at(watched));
  std::string line;
  for (const auto& [name, value] : metrics) line += fmt::format(" {} {:.4f}", name, value);
  if (progress_) {
    progress_->log(log::Level::kInfo, fmt::format("eval step {}:{}", step_, line));
  } else {
    log::info("eval step {}:{}", step_, line);
  }
  metrics["step"] = static_cast<double>(step_);
  metrics["time_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
  write_record(metrics, "eval");
}

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

namespace {

// One metrics.jsonl line: {"kind": ..., "step": ..., ...}; "a/b" keys become nested objects
// ({"breakdown_ms": {"forward": ...}}); counters print as integers.
JsonObject to_json(const std::string& kind, const Metrics& record,
                   const std::map<std::string, std::string>& text) {
  JsonObject out;
  out.set("kind", kind);
  std::map<std::string, JsonObject> nested;
  for (const auto& [name, value] : record) {
    const auto slash = name.find('/');
    if (slash != std::string::npos) {
      nested[name.substr(0, slash)].set(name.substr(slash + 1), value);
    } else if (name == "step" || name == "epoch") {
      out.set(name, static_cast<int64_t>(value));
    } else {
      out.set(name, value);
    }
  }
  for (auto& [name, object] : nested) out.set(name, std::move(object));
  for (const auto& [name, value] : text) out.set(name, value);
  return out;
}

}  // namespace

void Trainer::write_record(const Metrics& record, const std::string& kind) {
  history_.push_back(record);
  jsonl_->write(to_json(kind, record, {}));
  Metrics scalars;
  for (const auto& [name, value] : record) {
    if (name != "step" && name != "time_s" && name != "epoch") scalars[name] = value;
  }
  tensorboard_->add_scalars(step_, scalars, kind);
}

void Trainer::write_summary() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
  Metrics s;
  s["step"] = static_cast<double>(step_);
  s["time_s"] = elapsed;
  // Steady state: the logging windows after the first (which holds start-up: worker start, cuDNN
  // autotuning, allocator growth); with a single window, that one. Rates are their median, the
  // data wait their mean, GPU utilisation the samples inside them; whole-run values are kept
  // beside.
  std::vector<const Metrics*> windows;
  for (const auto& r : history_) {
    if (r.count("loss") && r.count("samples_per_s")) windows.push_back(&r);
  }
  double steady_from_s = 0;  // where the steady windows begin: the end of the first window
  if (windows.size() > 1) {
    steady_from_s = windows.front()->at("time_s");
    windows.erase(windows.begin());
  }
  auto median = [&](const std::string& key) {
    std::vector<double> v;
    for (const Metrics* r : windows) v.push_back(r->at(key));
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  auto mean = [&](const std::string& key) {
    double sum = 0;
    int64_t n = 0;
    for (const Metrics* r : windows) {
      if (auto it = r->find(key); it != r->end()) {
        sum += it->second;
        ++n;
      }
    }
    return n ? sum / static_cast<double>(n) : 0.0;
  };
  s["samples_per_s"] = median("samples_per_s");
  s["tokens_per_s"] = median("tokens_per_s");
  s["samples_per_s_overall"] = static_cast<double>(examples_seen_) / elapsed;
  s["tokens_per_s_overall"] = static_cast<double>(tokens_seen_) / elapsed;
  s["data_wait_pct"] = mean("data_wait_pct");
  s["host_data_wait_pct"] = mean("host_data_wait_pct");
  s["num_workers"] = static_cast<double>(config_.data.num_workers);
  s["pin_memory"] = config_.data.pin_memory ? 1.0 : 0.0;
  s["prefetch_factor"] = static_cast<double>(config_.data.prefetch_factor);
  s["batch_size"] = static_cast<double>(config_.data.batch_size);
  s["grad_accum_steps"] = static_cast<double>(config_.train.grad_accum_steps);
  s["host_syncs_per_step"] = total_steps_logged_ ? static_cast<double>(total_syncs_) /
                                                       static_cast<double>(total_steps_logged_)
                                                 : 0.0;
  s["tensor_cores"] = has_tensor_cores(device_) ? 1.0 : 0.0;
  std::map<std::string, std::string> text = {{"device", device_.str()},
                                             {"device_name", device_name(device_)},
                                             {"precision", config_.train.precision}};
  if (gpu_monitor_ && gpu_monitor_->available()) {
    const std::vector<GpuSample> samples = gpu_monitor_->samples();
    const GpuSummary whole = summarize_gpu_samples(samples);
    std::vector<GpuSample> steady;
    if (!windows.empty()) {
      const double to = windows.back()->at("time_s");
      for (const auto& g : samples) {
        if (g.t_s >= steady_from_s && g.t_s <= to) steady.push_back(g);
      }
    }
    const GpuSummary g = steady.size() >= 3 ? summarize_gpu_samples(steady) : whole;
    s["gpu_util_mean"] = g.util_mean;
    s["gpu_util_p10"] = g.util_p10;
    s["gpu_util_mean_overall"] = whole.util_mean;
    s["gpu_util_p10_overall"] = whole.util_p10;
    s["gpu_mem_used_pct"] =
        whole.mem_total_mib > 0 ? 100.0 * whole.mem_used_max_mib / whole.mem_total_mib : 0.0;
  }
  if (device_.is_cuda()) {
    s["mem_peak_mib"] = detail::cuda_peak_memory_mib(device_.index());
    s["mem_total_mib"] = detail::cuda_total_memory_mib(device_.index());
  }
  history_.push_back(s);
  jsonl_->write(to_json("summary", s, text));
  jsonl_->flush();
  tensorboard_->flush();
  std::string gpu;
  if (s.count("gpu_util_mean")) {
    gpu = fmt::format(", GPU utilisation {:.0f}% (p10 {:.0f}%; {:.0f}% over the whole run)",
                      s["gpu_util_mean"], s["gpu_util_p10"], s["gpu_util_mean_overall"]);
  }
  log::info("done: {} steps in {:.1f} s, {:.1f} samples/s, data wait {:.1f}%{}", step_, elapsed,
            s["samples_per_s"], s["data_wait_pct"], gpu);
  const auto findings = diagnose(
      stats_from_records(read_json_lines((fs::path(run_dir_) / "metrics.jsonl").string())));
  for (const auto& f : findings) log::info("doctor: {}", f.message);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------------------------

void Trainer::save_checkpoint(bool best) {
  auto writer = [this](torch::serialize::OutputArchive& archive) { save_state(archive); };
  if (best) {
    checkpoints_->save_best(writer);
    return;
  }
  last_checkpoint_ = checkpoints_->save(step_, writer);
  ++host_syncs_;  // copying the state to the host waits for the device
}

void Trainer::save_state(torch::serialize::OutputArchive& archive) {
  c10::Dict<std::string, at::Tensor> weights;
  for (const auto& p : model_->named_parameters())
    weights.insert(p.key(), p.value().detach().cpu());
  for (const auto& b : model_->named_buffers()) weights.insert(b.key(), b.value().detach().cpu());
  archive.write("model", c10::IValue(weights));

  torch::serialize::OutputArchive optimizer, schedule, scaler, rng;
  optimizer_->save(optimizer);
  schedule_->save(schedule);
  scaler_->save(scaler);
  save_rng_state(rng, capture_rng_state());
  archive.write("optimizer", optimizer);
  archive.write("schedule", schedule);
  archive.write("scaler", scaler);
  archive.write("rng", rng);
  for (const auto& cb : callbacks_) {
    torch::serialize::OutputArchive nested;
    cb->save(nested);
    archive.write("callback_" + cb->name(), nested);
  }
  // Loader position: the epoch and the micro-batches of it already consumed by the loop.
  archive.write("counters", at::tensor(std::vector<int64_t>{step_, epoch_, batches_in_epoch_,
                                                            examples_seen_, tokens_seen_}));
  archive.write("config", c10::IValue(to_yaml(config_)));
}

void Trainer::load_state(torch::serialize::InputArchive& archive) {
  c10::IValue weights_value;
  archive.read("model", weights_value);
  const auto weights = weights_value.toGenericDict();
  torch::NoGradGuard no_grad;
  auto restore = [&](const std::string& name, at::Tensor& target) {
    auto it = weights.find(name);
    if (it == weights.end())
      throw CheckpointError(fmt::format("checkpoint has no tensor '{}'", name));
    const at::Tensor value = it->value().toTensor();
    if (value.sizes() != target.sizes()) {
      throw CheckpointError(fmt::format("checkpoint tensor '{}' has shape {}, the model expects {}",
                                        name, c10::str(value.sizes()), c10::str(target.sizes())));
    }
    target.copy_(value);
  };
  for (auto& p : model_->named_parameters()) restore(p.key(), p.value());
  for (auto& b : model_->named_buffers()) restore(b.key(), b.value());

  torch::serialize::InputArchive optimizer, schedule, scaler, rng;
  archive.read("optimizer", optimizer);
  archive.read("schedule", schedule);
  archive.read("scaler", scaler);
  archive.read("rng", rng);
  optimizer_->load(optimizer);
  schedule_->load(schedule);
  scaler_->load(scaler);
  restore_rng_state(load_rng_state(rng));
  for (auto& cb : callbacks_) {
    torch::serialize::InputArchive nested;
    if (archive.try_read("callback_" + cb->name(), nested)) cb->load(nested);
  }
  at::Tensor counters;
  archive.read("counters", counters);
  const auto c = counters.accessor<int64_t, 1>();
  step_ = c[0];
  epoch_ = c[1];
  batches_in_epoch_ = c[2];
  examples_seen_ = c[3];
  tokens_seen_ = c[4];
}

void Trainer::resume_from(const std::string& resume) {
  if (resume.empty()) return;
  std::string path = resume;
  if (resume == "auto") {
    const auto latest = checkpoints_->latest();
    if (!latest) {
      log::info("--resume auto: no checkpoint in {}/checkpoints, starting fresh", run_dir_);
      return;
    }
    path = *latest;
  }
  checkpoints_->load(path,
                     [this](torch::serialize::InputArchive& archive) { load_state(archive); });
  last_checkpoint_ = path;
  log::info("resumed from {} at step {} (epoch {}, batch {})", path, step_, epoch_,
            batches_in_epoch_);
}

// ---------------------------------------------------------------------------------------------
// Profiling window
// ---------------------------------------------------------------------------------------------

void Trainer::start_profiler_if_due() {
  const auto& p = config_.train.profile;
  if (p.steps > 0 && step_ == p.start_step && !profiler_) {
    profiler_ =
        std::make_unique<TraceRecorder>((fs::path(run_dir_) / "trace.json").string(), device_);
  }
}

void Trainer::stop_profiler_if_due() {
  const auto& p = config_.train.profile;
  if (profiler_ && step_ >= p.start_step + p.steps) {
    profiler_->stop();
    profiler_.reset();
  }
}

}  // namespace brrr
