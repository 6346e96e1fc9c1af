#include "core/precision.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>

#include "core/error.h"
#include "core/log.h"

namespace brrr {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFP32;
  if (name == "tf32") return Precision::kTF32;
  if (name == "bf16") return Precision::kBF16;
  if (name == "fp16") return Precision::kFP16;
  throw ConfigError("train.precision: unknown value '" + name +
                    "' (expected one of fp32, tf32, bf16, fp16)");
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFP32:
      return "fp32";
    case Precision::kTF32:
      return "tf32";
    case Precision::kBF16:
      return "bf16";
    case Precision::kFP16:
      return "fp16";
  }
  throw Error("to_string: invalid Precision value " + std::to_string(static_cast<int>(precision)));
}

std::optional<at::ScalarType> autocast_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBF16:
      return at::kBFloat16;
    case Precision::kFP16:
      return at::kHalf;
    default:
      return std::nullopt;
  }
}

bool needs_grad_scaling(Precision precision) {
  return precision == Precision::kFP16;
}

AutocastGuard::AutocastGuard(Precision precision, c10::Device device)
    : device_type_(device.type()) {
  const std::optional<at::ScalarType> dtype = autocast_dtype(precision);
  if (!dtype) return;
  if (device_type_ != c10::DeviceType::CPU && device_type_ != c10::DeviceType::CUDA) {
    throw Error("AutocastGuard: autocast with " + to_string(precision) +
                " is supported on cpu and cuda devices, not on " + device.str());
  }
  prev_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, *dtype);
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // As torch.autocast.__exit__: the cache of casted weights lives as long as the outermost scope.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_type_, prev_dtype_);
}

void set_tf32(bool enabled) {
  auto& context = at::globalContext();
  context.setAllowTF32CuBLAS(enabled);
  context.setAllowTF32CuDNN(enabled);
  context.setFloat32MatmulPrecision(enabled ? "high" : "highest");
  log::debug("precision: TF32 matmuls/convolutions {}", enabled ? "allowed" : "disabled");
}

}  // namespace brrr
