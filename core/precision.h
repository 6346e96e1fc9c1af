#pragma once
// The precision policy of a run (`train.precision`): fp32, tf32 (fp32 storage, TF32 tensor-core
// matmuls), bf16 / fp16 (autocast). Model weights always stay fp32; autocast only changes the
// dtype in which eligible ops (matmul, conv, ...) run inside an AutocastGuard's scope.
//
// Thread safety: autocast state is thread-local in libtorch, so an AutocastGuard affects only the
// thread that created it (autograd's backward runs the recorded casts and needs no guard).
// set_tf32() changes process-wide state.
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

namespace brrr {

/// `train.precision`.
enum class Precision { kFP32, kTF32, kBF16, kFP16 };

/// Parses "fp32", "tf32", "bf16", "fp16"; throws ConfigError naming `train.precision` otherwise.
Precision parse_precision(const std::string& name);

/// The config spelling ("fp32", ...), so parse_precision(to_string(p)) == p.
std::string to_string(Precision precision);

/// The autocast compute dtype: bf16 -> BFloat16, fp16 -> Half, fp32/tf32 -> nullopt (no autocast).
std::optional<at::ScalarType> autocast_dtype(Precision precision);

/// Whether the precision needs dynamic loss scaling (only fp16: its 5-bit exponent underflows
/// small gradients).
bool needs_grad_scaling(Precision precision);

/// RAII scope of libtorch autocast for one device type (CUDA or CPU), the C++ equivalent of
/// `with torch.autocast(device_type, dtype):`. For fp32/tf32 it changes nothing. On exit it
/// restores the previous enabled flag and dtype of that device type and clears the autocast
/// weight-cast cache when the outermost autocast scope closes. Nests correctly.
class AutocastGuard {
 public:
  /// Enables autocast with autocast_dtype(precision) for `device.type()` (kCPU or kCUDA).
  AutocastGuard(Precision precision, c10::Device device);
  ~AutocastGuard();

  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard(AutocastGuard&&) = delete;
  AutocastGuard& operator=(AutocastGuard&&) = delete;

  /// Whether this guard turned autocast on (false for fp32/tf32).
  bool active() const { return active_; }

 private:
  c10::DeviceType device_type_;
  bool active_ = false;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
};

/// Allows (true) or forbids (false) TF32 in cuBLAS matmuls and cuDNN convolutions, and sets the
/// float32 matmul precision to "high" (true) or "highest" (false). Process-wide. Harmless without
/// CUDA (the flags are then simply recorded).
void set_tf32(bool enabled);

}  // namespace brrr
