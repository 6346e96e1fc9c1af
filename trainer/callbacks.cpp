#include "trainer/callbacks.h"

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "models/model.h"
#include "trainer/trainer.h"

namespace brrr {
namespace {

double worst(const std::string& mode) {
  return mode == "max" ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity();
}

const double* find_metric(const Metrics& metrics, const std::string& name, const std::string& who) {
  auto it = metrics.find(name);
  if (it == metrics.end()) {
    std::string known;
    for (const auto& [k, v] : metrics) known += (known.empty() ? "" : ", ") + k;
    log::warn("{}: metric '{}' is not reported by evaluation (have: {})", who, name, known);
    return nullptr;
  }
  return &it->second;
}

void write_double(torch::serialize::OutputArchive& a, const std::string& key, double v) {
  a.write(key, at::tensor(v, at::kDouble));
}

double read_double(torch::serialize::InputArchive& a, const std::string& key) {
  at::Tensor t;
  a.read(key, t);
  return t.item<double>();
}

}  // namespace

bool improves(double value, double best, const std::string& mode, double min_delta) {
  if (!std::isfinite(value)) return false;
  return mode == "max" ? value > best + min_delta : value < best - min_delta;
}

// ---- EarlyStopping ----

EarlyStopping::EarlyStopping(std::string metric, std::string mode, int64_t patience,
                             double min_delta)
    : metric_(std::move(metric)),
      mode_(std::move(mode)),
      patience_(patience),
      min_delta_(min_delta),
      best_(worst(mode_)) {}

void EarlyStopping::on_eval_end(Trainer& trainer, int64_t step, const Metrics& metrics) {
  const double* value = find_metric(metrics, metric_, "early_stopping");
  if (value == nullptr) return;
  if (improves(*value, best_, mode_, min_delta_)) {
    best_ = *value;
    bad_evals_ = 0;
    return;
  }
  ++bad_evals_;
  if (bad_evals_ >= patience_) {
    trainer.request_stop(
        fmt::format("early stopping: {} did not improve on {:.6g} for {} evaluations "
                    "(step {})",
                    metric_, best_, bad_evals_, step));
  }
}

void EarlyStopping::save(torch::serialize::OutputArchive& archive) const {
  write_double(archive, "best", best_);
  write_double(archive, "bad_evals", static_cast<double>(bad_evals_));
}

void EarlyStopping::load(torch::serialize::InputArchive& archive) {
  best_ = read_double(archive, "best");
  bad_evals_ = static_cast<int64_t>(read_double(archive, "bad_evals"));
}

// ---- Ema ----

Ema::Ema(double decay) : decay_(decay) {
  if (!(decay > 0.0 && decay < 1.0)) {
    throw ConfigError(fmt::format("train.ema_decay: must be in (0, 1), got {}", decay));
  }
}

void Ema::on_train_start(Trainer& trainer) {
  params_.clear();
  for (const auto& p : trainer.model().parameters()) params_.push_back(p);
  if (shadow_.size() == params_.size()) {  // restored from a checkpoint (on the CPU)
    for (size_t i = 0; i < shadow_.size(); ++i) shadow_[i] = shadow_[i].to(params_[i].device());
    return;
  }
  shadow_.clear();
  for (const auto& p : params_) shadow_.push_back(p.detach().to(at::kFloat).clone());
}

void Ema::on_step_end(Trainer& /*trainer*/, int64_t /*step*/) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> values;
  values.reserve(params_.size());
  for (const auto& p : params_) values.push_back(p.detach().to(at::kFloat));
  // shadow += (1 - decay) * (param - shadow): one multi-tensor kernel over all parameters.
  at::_foreach_lerp_(shadow_, values, 1.0 - decay_);
}

void Ema::on_eval_begin(Trainer& trainer) {
  if (params_.empty()) on_train_start(trainer);
  torch::NoGradGuard no_grad;
  backup_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    backup_.push_back(params_[i].detach().clone());
    params_[i].detach().copy_(shadow_[i]);
  }
}

void Ema::on_eval_end(Trainer& /*trainer*/, int64_t /*step*/, const Metrics& /*metrics*/) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < backup_.size(); ++i) params_[i].detach().copy_(backup_[i]);
  backup_.clear();
}

void Ema::save(torch::serialize::OutputArchive& archive) const {
  for (size_t i = 0; i < shadow_.size(); ++i) archive.write(std::to_string(i), shadow_[i].cpu());
  write_double(archive, "count", static_cast<double>(shadow_.size()));
}

void Ema::load(torch::serialize::InputArchive& archive) {
  const auto n = static_cast<size_t>(read_double(archive, "count"));
  shadow_.assign(n, at::Tensor());
  for (size_t i = 0; i < n; ++i) archive.read(std::to_string(i), shadow_[i]);
  // Moved to the parameters' device in on_train_start when the live parameters are known.
}

// ---- BestCheckpoint ----

BestCheckpoint::BestCheckpoint(std::string metric, std::string mode)
    : metric_(std::move(metric)), mode_(std::move(mode)), best_(worst(mode_)) {}

void BestCheckpoint::on_eval_end(Trainer& trainer, int64_t step, const Metrics& metrics) {
  const double* value = find_metric(metrics, metric_, "best_checkpoint");
  if (value == nullptr || !improves(*value, best_, mode_)) return;
  best_ = *value;
  trainer.save_checkpoint(/*best=*/true);
  log::info("best checkpoint: {} = {:.6g} at step {}", metric_, best_, step);
}

void BestCheckpoint::save(torch::serialize::OutputArchive& archive) const {
  write_double(archive, "best", best_);
}

void BestCheckpoint::load(torch::serialize::InputArchive& archive) {
  best_ = read_double(archive, "best");
}

}  // namespace brrr
