#include "core/ops/batch_norm_act.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace brrr {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::string describe(const at::Tensor& t) {
  return fmt::format("{} [{}] on {}", c10::toString(t.scalar_type()), fmt::join(t.sizes(), ", "),
                     t.device().str());
}

void check_args(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                const at::Tensor& bias, const at::Tensor& running_mean,
                const at::Tensor& running_var, bool training, double momentum, double eps) {
  const at::ScalarType dtype = x.scalar_type();
  if (x.dim() != 4 || x.size(1) == 0 ||
      (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)) {
    throw DataError(fmt::format(
        "batch_norm_act: x must be (N, C, H, W) with C > 0, float32, bfloat16 or float16, got {}",
        describe(x)));
  }
  if (training && x.numel() / x.size(1) < 2) {
    throw DataError(fmt::format(
        "batch_norm_act: training needs more than one value per channel, got x {}", describe(x)));
  }
  if (residual.defined() && (residual.sizes() != x.sizes() || residual.scalar_type() != dtype ||
                             residual.device() != x.device())) {
    throw DataError(fmt::format("batch_norm_act: residual must be like x ({}), got {}",
                                describe(x), describe(residual)));
  }
  const int64_t channels = x.size(1);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"weight", &weight},
                                {"bias", &bias},
                                {"running_mean", &running_mean},
                                {"running_var", &running_var}}) {
    const bool optional = t == &running_mean || t == &running_var;
    if (optional && !t->defined()) continue;
    if (!t->defined() || t->scalar_type() != at::kFloat || t->dim() != 1 ||
        t->size(0) != channels || t->device() != x.device()) {
      throw DataError(fmt::format("batch_norm_act: {} must be float32 ({},) on {} for x {}, got {}",
                                  name, channels, x.device().str(), describe(x),
                                  t->defined() ? describe(*t) : std::string("undefined")));
    }
  }
  if (running_mean.defined() != running_var.defined()) {
    throw DataError("batch_norm_act: running_mean and running_var must be both given or neither");
  }
  if (!training && !running_mean.defined()) {
    throw DataError("batch_norm_act: evaluation (training = false) needs the running statistics");
  }
  if (!(eps > 0.0) || !(momentum >= 0.0 && momentum <= 1.0)) {
    throw DataError(fmt::format(
        "batch_norm_act: eps must be > 0 and momentum in [0, 1], got eps {} momentum {}", eps,
        momentum));
  }
}

/// The shapes (dtype, sizes, residual) cuDNN turned down: the reference from then on. Thread-safe;
/// while it is empty (every shape of a ResNet) a call costs one atomic load, no key and no lock.
class ShapeSet {
 public:
  static std::string key(const at::Tensor& x, bool with_residual) {
    return fmt::format("{} [{}]{}", c10::toString(x.scalar_type()), fmt::join(x.sizes(), ", "),
                       with_residual ? " +" : "");
  }
  bool contains(const at::Tensor& x, bool with_residual) const {
    if (empty_.load(std::memory_order_acquire)) return false;
    const std::lock_guard<std::mutex> lock(mutex_);
    return keys_.count(key(x, with_residual)) > 0;
  }
  void insert(const at::Tensor& x, bool with_residual) {
    const std::lock_guard<std::mutex> lock(mutex_);
    keys_.insert(key(x, with_residual));
    empty_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> empty_{true};
  mutable std::mutex mutex_;
  std::set<std::string> keys_;
};

ShapeSet& unsupported_shapes() {
  static ShapeSet shapes;
  return shapes;
}

bool fused_layout(const at::Tensor& x) {
  return x.is_contiguous(at::MemoryFormat::ChannelsLast) &&
         (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf);
}

class BatchNormActFunction : public torch::autograd::Function<BatchNormActFunction> {
 public:
  // An undefined tensor cannot be a Function's input, so "none" comes as a 0-element one.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const at::Tensor& residual_or_empty, const at::Tensor& weight,
                               const at::Tensor& bias, const at::Tensor& running_mean_or_empty,
                               const at::Tensor& running_var_or_empty, double momentum,
                               double eps) {
    const bool with_residual = residual_or_empty.numel() > 0;
    const at::Tensor residual = with_residual ? residual_or_empty : at::Tensor();
    const at::Tensor running_mean =
        running_mean_or_empty.numel() > 0 ? running_mean_or_empty : at::Tensor();
    const at::Tensor running_var =
        running_var_or_empty.numel() > 0 ? running_var_or_empty : at::Tensor();
    std::vector<at::Tensor> out = detail::batch_norm_act_forward_cudnn(
        x, residual, weight, bias, running_mean, running_var, momentum, eps);
    ctx->save_for_backward({x, out[0], weight, bias, out[1], out[2], out[3]});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["with_residual"] = with_residual;
    return {out[0]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const bool with_residual = ctx->saved_data["with_residual"].toBool();
    const at::Tensor dy =
        grads[0].contiguous(at::MemoryFormat::ChannelsLast).to(s[0].scalar_type());
    std::vector<at::Tensor> g = detail::batch_norm_act_backward_cudnn(
        dy, s[0], s[1], s[2], s[3], s[4], s[5], s[6], ctx->saved_data["eps"].toDouble(),
        with_residual);
    return {g[0], with_residual ? g[1] : at::Tensor(), g[2], g[3], {}, {}, {}, {}};
  }
};

/// Whether x takes cuDNN's fused calls. Under train.deterministic ATen's batch norm, whose
/// algorithms ATen vouches for.
bool takes_cudnn(const at::Tensor& x, bool training) {
  return x.is_cuda() && training && fused_layout(x) && detail::batch_norm_act_cudnn_built() &&
         !at::globalContext().deterministicAlgorithms();
}

/// An undefined tensor as the Function's "none" (a 0-element tensor), a defined one as it is.
at::Tensor or_none(const at::Tensor& t, const at::TensorOptions& options) {
  return t.defined() ? t : at::empty({0}, options);
}

}  // namespace

const char* batch_norm_act_path(const at::Tensor& x, bool training) {
  return takes_cudnn(x, training) ? "cudnn" : "reference";
}

at::Tensor batch_norm_act_reference(const at::Tensor& x, const at::Tensor& residual,
                                    const at::Tensor& weight, const at::Tensor& bias,
                                    const at::Tensor& running_mean, const at::Tensor& running_var,
                                    bool training, double momentum, double eps, bool relu) {
  check_args(x, residual, weight, bias, running_mean, running_var, training, momentum, eps);
  at::Tensor y = at::batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
                                eps, /*cudnn_enabled=*/true);
  if (residual.defined()) y = y + residual;
  return relu ? at::relu(y) : y;
}

at::Tensor batch_norm_act(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& running_mean,
                          const at::Tensor& running_var, bool training, double momentum,
                          double eps, bool relu) {
  // cuDNN's fused forms all end in the activation; a norm without the ReLU is ATen's (which
  // calls cuDNN's plain batch norm on a GPU itself).
  if (!relu || !takes_cudnn(x, training)) {
    return batch_norm_act_reference(x, residual, weight, bias, running_mean, running_var, training,
                                    momentum, eps, relu);
  }
  check_args(x, residual, weight, bias, running_mean, running_var, training, momentum, eps);
  if (unsupported_shapes().contains(x, residual.defined())) {
    return batch_norm_act_reference(x, residual, weight, bias, running_mean, running_var, training,
                                    momentum, eps, relu);
  }
  const at::Tensor r = or_none(
      residual.defined() ? residual.contiguous(at::MemoryFormat::ChannelsLast) : residual,
      x.options());
  try {
    return BatchNormActFunction::apply(x, r, weight.contiguous(), bias.contiguous(),
                                       or_none(running_mean, weight.options()),
                                       or_none(running_var, weight.options()), momentum, eps)[0];
  } catch (const detail::BatchNormActUnsupported& e) {  // cuDNN ran nothing: the reference
    log::info("{}; ATen's batch norm, add and ReLU for it from now on", e.what());
    unsupported_shapes().insert(x, residual.defined());
    return batch_norm_act_reference(x, residual, weight, bias, running_mean, running_var, training,
                                    momentum, eps, relu);
  }
}

}  // namespace brrr
