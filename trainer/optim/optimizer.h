#pragma once
// brrr's optimizers: SGD (momentum, Nesterov, L2 weight decay), Adam (L2) and AdamW (decoupled),
// updating all parameters of a group with a few multi-tensor kernels instead of torch::optim's
// per-parameter loops.
//
// Paths (chosen once, in the constructor, by `optim.fused`):
//  - fused: ATen's _fused_sgd_/_fused_adam_/_fused_adamw_ (CUDA, and CPU in recent ATen). They
//    take grad_scale/found_inf tensors, so a step with non-finite fp16 gradients is skipped on the
//    device without a host sync. Used for `fused: auto` on CUDA and `fused: true` anywhere.
//  - foreach: _foreach_* ops, one kernel per op over all parameters of a group, the same sequence
//    of ops as torch.optim's `foreach=True` implementation (results match it bit for bit on CPU).
//    A found_inf tensor is honoured with ONE host read per step (a device sync on CUDA).
//
// State, per parameter index (the flat order over groups, as in groups()):
//   exp_avg, exp_avg_sq (Adam), momentum_buffer (SGD with momentum): same shape/device as the
//   parameter, created at the parameter's first step;
//   step (Adam): a float32 0-dim tensor as in PyTorch: on the parameter's device for the fused
//   path (the kernel reads it there), on the CPU for the foreach path (bias corrections are
//   computed on the host from it, which costs no sync).
// Parameters without a gradient at step time are skipped (their state and step do not advance).
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace brrr {

/// Parameters sharing hyper-parameters. All parameters of an optimizer share one device and dtype.
struct ParamGroup {
  std::vector<at::Tensor> params;
  /// L2 (sgd, adam) or decoupled (adamw) weight decay of this group.
  double weight_decay = 0.0;
  /// The group's lr is Optimizer::lr() * lr_scale.
  double lr_scale = 1.0;
};

/// Per-parameter optimizer state (undefined tensors = not created yet / not used).
struct ParamState {
  at::Tensor exp_avg;          // like the parameter
  at::Tensor exp_avg_sq;       // like the parameter
  at::Tensor momentum_buffer;  // like the parameter
  at::Tensor step;             // () float32
};

class Optimizer {
 public:
  /// `names` (one per parameter, flat over groups; may be empty) are used in error messages.
  /// Throws Error when parameters are not floating point or do not share `device` and one dtype.
  Optimizer(std::vector<ParamGroup> groups, std::vector<std::string> names, double lr, bool fused,
            c10::Device device);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update from the parameters' current gradients. `grad_scale`: the gradients are still
  /// multiplied by it (fused path unscales inside the kernel; foreach path divides a copy).
  /// `found_inf` (0-dim float32, 1 = skip): the whole step is skipped, state included.
  virtual void step(const at::Tensor* grad_scale = nullptr,
                    const at::Tensor* found_inf = nullptr) = 0;

  /// Drops the gradients (set_to_none, PyTorch's default) or zeroes them in one foreach kernel.
  void zero_grad(bool set_to_none = true);

  /// Base learning rate (set by the schedule before each step); group lr = lr * lr_scale. On the
  /// fused path the value is also written to a device tensor that the kernels read (lr_tensor()),
  /// without a host sync, so a captured step reads the lr of its replay.
  void set_lr(double lr);
  double lr() const { return lr_; }
  /// Fused path: the base lr as a 0-dim float32 tensor on the parameters' device (undefined on
  /// the foreach path).
  const at::Tensor& lr_tensor() const { return lr_on_device_; }

  const std::vector<ParamGroup>& groups() const { return groups_; }
  /// Whether the fused ATen kernels are used.
  bool fused() const { return fused_; }
  /// "sgd", "adam" or "adamw".
  virtual std::string name() const = 0;
  /// State of parameter `index` (flat over groups).
  const ParamState& state(size_t index) const { return state_.at(index); }
  /// All parameters, flat over groups (the indexing of state()).
  std::vector<at::Tensor> parameters() const;

  /// Writes lr and every parameter's state by flat index (tensors moved to the CPU).
  virtual void save(torch::serialize::OutputArchive& archive) const;
  /// Restores what save() wrote into this optimizer's device; throws CheckpointError when the
  /// optimizer name, parameter count or a state shape differs.
  virtual void load(torch::serialize::InputArchive& archive);

 protected:
  /// Flat indices (into state_) and gradients of the group's parameters that have a gradient.
  struct GroupGrads {
    std::vector<size_t> indices;
    std::vector<at::Tensor> params;
    std::vector<at::Tensor> grads;
  };
  GroupGrads collect(size_t group) const;
  /// Foreach path: the single host read of found_inf (true = skip this step).
  static bool host_found_inf(const at::Tensor* found_inf);
  /// The fused kernels' optional grad_scale/found_inf arguments from step()'s pointers.
  static std::optional<at::Tensor> optional_tensor(const at::Tensor* t);
  /// Device of the `step` state tensors (CPU for the foreach path).
  c10::Device step_device() const;
  /// Fused path: the lr of `group` on the device (lr_tensor() * lr_scale).
  at::Tensor group_lr(size_t group) const;
  std::string param_name(size_t index) const;
  const at::Tensor& parameters_at(size_t index) const;

  std::vector<ParamGroup> groups_;
  std::vector<std::string> names_;
  std::vector<size_t> group_offset_;  // flat index of each group's first parameter
  std::vector<ParamState> state_;
  double lr_;
  bool fused_;
  c10::Device device_;
  at::Tensor lr_on_device_;  // () float32 on device_, fused path only
};

/// Builds the optimizer named by `options.name` over `named_parameters`. With no_decay_1d,
/// parameters with dim() < 2 go into a second group with weight_decay 0 (the first group holds
/// the others, in their given order). Parameters not requiring grad are left out. `fused`:
/// "auto" = fused on CUDA, foreach on CPU; "true"; "false". Throws ConfigError naming `optim.*`.
std::unique_ptr<Optimizer> make_optimizer(
    const OptimOptions& options,
    const std::vector<std::pair<std::string, at::Tensor>>& named_parameters, c10::Device device);

}  // namespace brrr
