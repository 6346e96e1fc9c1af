#pragma once
// Dynamic loss scaling for fp16 training, with the semantics of torch.amp.GradScaler:
//   loss = scaler.scale(loss); loss.backward();   // grads are scaled by S
//   scaler.unscale(params);                      // grads /= S in place, found_inf = any non-finite
//   clip_grad_norm(params, max_norm);            // optional, on the true gradients
//   optimizer.step(nullptr, &scaler.found_inf()); // skipped when found_inf == 1
//   scaler.update();                             // S *= backoff on inf, *= growth after N good
//   steps
// Invariant: scale, growth tracker, found_inf and the skip counter live on the training device and
// are only touched by device kernels, so a step costs no host-device synchronisation; only
// scale_value() and skipped_steps() read them back (for logging).
// A disabled scaler (fp32/tf32/bf16) is a no-op everywhere: scale() returns the loss unchanged.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "core/config.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace brrr {

class GradScaler {
 public:
  /// `options` as in `train.fp16`; `enabled` is normally needs_grad_scaling(precision). Throws
  /// ConfigError naming `train.fp16.*` for non-positive scale, growth_factor <= 1,
  /// backoff_factor outside (0, 1) or growth_interval < 1.
  GradScaler(GradScalerOptions options, bool enabled, c10::Device device);

  bool enabled() const { return enabled_; }
  const GradScalerOptions& options() const { return options_; }

  /// loss * scale (in the loss's dtype); the loss itself when disabled.
  at::Tensor scale(const at::Tensor& loss) const;

  /// Divides every defined gradient of `params` by the scale in place and sets found_inf() to 1
  /// if any of them holds inf/NaN (0 otherwise). Call exactly once per optimizer step, after the
  /// last backward of the step and before clipping. Throws Error when called twice before update().
  void unscale(const std::vector<at::Tensor>& params);

  /// 0-dim float32 tensor on the device: 1.0 when the last unscale() saw a non-finite gradient.
  /// Pass it to Optimizer::step so the step is skipped. Undefined while disabled.
  const at::Tensor& found_inf() const { return found_inf_; }

  /// After the optimizer step: backs the scale off on a non-finite step, grows it after
  /// growth_interval finite steps in a row (torch's _amp_update_scale_), counts skipped steps.
  /// Throws Error if unscale() was not called since the previous update().
  void update();

  /// Forgets the unscale() of a step that is abandoned before its update() (a CUDA-graph capture
  /// that failed: nothing of it ran on the device), so that the step can be taken again.
  void abandon_step() { unscaled_ = false; }

  /// Current scale, read back from the device (a sync: for logging only). 1.0 when disabled.
  double scale_value() const;
  /// Optimizer steps skipped for non-finite gradients so far (a sync). 0 when disabled.
  int64_t skipped_steps() const;

  /// Writes scale, growth tracker, skipped-step count and options (nothing but `enabled` when
  /// disabled).
  void save(torch::serialize::OutputArchive& archive) const;
  /// Restores what save() wrote, options included (as torch's load_state_dict). Throws
  /// CheckpointError when loading into an enabled scaler an archive saved by a disabled one.
  void load(torch::serialize::InputArchive& archive);

 private:
  GradScalerOptions options_;
  bool enabled_;
  c10::Device device_;
  bool unscaled_ = false;      // unscale() ran since the last update()
  at::Tensor scale_;           // () float32
  at::Tensor growth_tracker_;  // () int32: finite steps in a row since the last change
  at::Tensor found_inf_;       // () float32
  at::Tensor skipped_;         // () int64
};

}  // namespace brrr
