#include "trainer/optim/grad_scaler.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <string>

#include "core/error.h"

namespace brrr {
namespace {

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw CheckpointError("GradScaler::load: the checkpoint has no '" + key + "' entry");
  }
  return value;
}

at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& key) {
  at::Tensor tensor;
  if (!archive.try_read(key, tensor)) {
    throw CheckpointError("GradScaler::load: the checkpoint has no tensor '" + key + "'");
  }
  return tensor;
}

/// "cuda" (no index: the current device) matches any "cuda:N"; explicit indices must agree.
bool same_device(const c10::Device& a, const c10::Device& b) {
  return a.type() == b.type() && (!a.has_index() || !b.has_index() || a.index() == b.index());
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options, bool enabled, c10::Device device)
    : options_(options), enabled_(enabled), device_(device) {
  if (!(options_.init_scale > 0.0)) {
    throw ConfigError(
        fmt::format("train.fp16.init_scale must be > 0, got {}", options_.init_scale));
  }
  if (!(options_.growth_factor > 1.0)) {
    throw ConfigError(
        fmt::format("train.fp16.growth_factor must be > 1, got {}", options_.growth_factor));
  }
  if (!(options_.backoff_factor > 0.0 && options_.backoff_factor < 1.0)) {
    throw ConfigError(fmt::format("train.fp16.backoff_factor must be in (0, 1), got {}",
                                  options_.backoff_factor));
  }
  if (options_.growth_interval < 1) {
    throw ConfigError(
        fmt::format("train.fp16.growth_interval must be >= 1, got {}", options_.growth_interval));
  }
  if (!enabled_) return;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  scale_ = at::full({}, options_.init_scale, f32);
  growth_tracker_ = at::zeros({}, f32.dtype(at::kInt));
  found_inf_ = at::zeros({}, f32);
  skipped_ = at::zeros({}, f32.dtype(at::kLong));
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!enabled_) return loss;
  // A 0-dim float32 factor does not promote a half/bf16 loss (same category), as in torch.
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

void GradScaler::unscale(const std::vector<at::Tensor>& params) {
  if (!enabled_) return;
  if (unscaled_) {
    throw Error(
        "GradScaler::unscale was already called for this step; call update() after the "
        "optimizer step before unscaling again");
  }
  // _amp_foreach_non_finite_check_and_unscale_ wants one dtype per call.
  std::map<at::ScalarType, std::vector<at::Tensor>> grads_by_dtype;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& grad = params[i].grad();
    if (!grad.defined()) continue;
    if (grad.scalar_type() == at::kHalf) {
      // Unscaling fp16 gradients in place loses their small values (torch refuses it too).
      throw Error(
          fmt::format("GradScaler::unscale: gradient of parameter {} is float16; keep the weights "
                      "in float32 under fp16 autocast",
                      i));
    }
    if (!same_device(grad.device(), device_)) {
      throw Error("GradScaler::unscale: gradient of parameter " + std::to_string(i) + " is on " +
                  grad.device().str() + ", the scaler on " + device_.str());
    }
    grads_by_dtype[grad.scalar_type()].push_back(grad);
  }
  // The reciprocal in double, as torch does, so that inv_scale * scale == 1 exactly for powers
  // of 2.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  found_inf_.zero_();
  for (auto& [dtype, grads] : grads_by_dtype) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  }
  unscaled_ = true;
}

void GradScaler::update() {
  if (!enabled_) return;
  if (!unscaled_) {
    throw Error(
        "GradScaler::update: no inf check was recorded for this step; call unscale(params) "
        "after backward and before the optimizer step");
  }
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
  skipped_.add_(found_inf_.to(at::kLong));
  unscaled_ = false;
}

double GradScaler::scale_value() const {
  return enabled_ ? scale_.item<double>() : 1.0;
}

int64_t GradScaler::skipped_steps() const {
  return enabled_ ? skipped_.item<int64_t>() : 0;
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("enabled", c10::IValue(enabled_));
  if (!enabled_) return;
  archive.write("scale", scale_.cpu());
  archive.write("growth_tracker", growth_tracker_.cpu());
  archive.write("skipped_steps", skipped_.cpu());
  archive.write("init_scale", c10::IValue(options_.init_scale));
  archive.write("growth_factor", c10::IValue(options_.growth_factor));
  archive.write("backoff_factor", c10::IValue(options_.backoff_factor));
  archive.write("growth_interval", c10::IValue(options_.growth_interval));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  if (!enabled_) return;
  if (!read_value(archive, "enabled").toBool()) {
    throw CheckpointError(
        "GradScaler::load: the checkpoint was saved by a disabled scaler (precision other than "
        "fp16) and holds no scale to restore");
  }
  options_.init_scale = read_value(archive, "init_scale").toDouble();
  options_.growth_factor = read_value(archive, "growth_factor").toDouble();
  options_.backoff_factor = read_value(archive, "backoff_factor").toDouble();
  options_.growth_interval = read_value(archive, "growth_interval").toInt();
  scale_.copy_(read_tensor(archive, "scale"));
  growth_tracker_.copy_(read_tensor(archive, "growth_tracker"));
  skipped_.copy_(read_tensor(archive, "skipped_steps"));
  found_inf_.zero_();
  unscaled_ = false;
}

}  // namespace brrr
