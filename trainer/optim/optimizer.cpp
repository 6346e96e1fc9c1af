#include "trainer/optim/optimizer.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "core/error.h"
#include "core/log.h"
#include "trainer/optim/adam.h"
#include "trainer/optim/sgd.h"

namespace brrr {
namespace {

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw CheckpointError("Optimizer::load: the checkpoint has no '" + key + "' entry");
  }
  return value;
}

std::string state_key(size_t index, const char* field) {
  return "state_" + std::to_string(index) + "_" + field;
}

bool parse_fused(const std::string& fused, c10::Device device) {
  if (fused == "auto") return device.is_cuda();
  if (fused == "true") return true;
  if (fused == "false") return false;
  throw ConfigError("optim.fused: unknown value '" + fused + "' (expected auto, true or false)");
}

/// "cuda" (no index: the current device) matches any "cuda:N"; explicit indices must agree.
bool same_device(const c10::Device& a, const c10::Device& b) {
  return a.type() == b.type() && (!a.has_index() || !b.has_index() || a.index() == b.index());
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::vector<std::string> names, double lr,
                     bool fused, c10::Device device)
    : groups_(std::move(groups)),
      names_(std::move(names)),
      lr_(lr),
      fused_(fused),
      device_(device) {
  if (fused_)
    lr_on_device_ = at::full({}, lr, at::TensorOptions().dtype(at::kFloat).device(device_));
  size_t count = 0;
  for (const ParamGroup& group : groups_) {
    group_offset_.push_back(count);
    count += group.params.size();
  }
  if (!names_.empty() && names_.size() != count) {
    throw Error(fmt::format("Optimizer: got {} names for {} parameters", names_.size(), count));
  }
  state_.resize(count);
  std::optional<at::ScalarType> dtype;
  for (size_t i = 0; i < count; ++i) {
    const at::Tensor& p = parameters_at(i);
    if (!p.defined() || !p.is_floating_point()) {
      throw Error("Optimizer: parameter " + param_name(i) + " is " +
                  (p.defined() ? std::string("of dtype ") + c10::toString(p.scalar_type())
                               : std::string("undefined")) +
                  "; only floating-point parameters can be optimized");
    }
    if (!same_device(p.device(), device_)) {
      throw Error("Optimizer: parameter " + param_name(i) + " is on " + p.device().str() +
                  ", the optimizer on " + device_.str());
    }
    if (dtype && p.scalar_type() != *dtype) {
      // One dtype keeps each group a single fused / foreach launch.
      throw Error("Optimizer: parameter " + param_name(i) + " is " +
                  c10::toString(p.scalar_type()) + " but the first parameter is " +
                  c10::toString(*dtype) + "; all parameters must share one dtype");
    }
    dtype = p.scalar_type();
  }
}

const at::Tensor& Optimizer::parameters_at(size_t index) const {
  size_t group = groups_.size() - 1;
  while (group_offset_[group] > index) --group;
  return groups_[group].params[index - group_offset_[group]];
}

std::vector<at::Tensor> Optimizer::parameters() const {
  std::vector<at::Tensor> all;
  all.reserve(state_.size());
  for (const ParamGroup& group : groups_) {
    all.insert(all.end(), group.params.begin(), group.params.end());
  }
  return all;
}

void Optimizer::zero_grad(bool set_to_none) {
  std::vector<at::Tensor> grads;
  for (const ParamGroup& group : groups_) {
    for (const at::Tensor& p : group.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.mutable_grad().reset();
      } else {
        grads.push_back(p.grad().detach());
      }
    }
  }
  if (!grads.empty()) at::_foreach_zero_(grads);
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0.0))
    throw Error(fmt::format("Optimizer::set_lr: learning rate must be >= 0, got {}", lr));
  lr_ = lr;
  // A one-element fill from a host value: a tiny kernel, no host-device sync.
  if (fused_) lr_on_device_.fill_(lr);
}

at::Tensor Optimizer::group_lr(size_t group) const {
  const double scale = groups_.at(group).lr_scale;
  return scale == 1.0 ? lr_on_device_ : lr_on_device_ * scale;
}

Optimizer::GroupGrads Optimizer::collect(size_t group) const {
  GroupGrads out;
  const ParamGroup& g = groups_.at(group);
  for (size_t j = 0; j < g.params.size(); ++j) {
    const at::Tensor& grad = g.params[j].grad();
    if (!grad.defined()) continue;
    const size_t index = group_offset_[group] + j;
    if (grad.is_sparse()) {
      throw Error("Optimizer: parameter " + param_name(index) + " has a sparse gradient, which " +
                  name() + " does not support");
    }
    out.indices.push_back(index);
    out.params.push_back(g.params[j].detach());
    out.grads.push_back(grad.detach());
  }
  return out;
}

std::optional<at::Tensor> Optimizer::optional_tensor(const at::Tensor* t) {
  return t != nullptr ? std::optional<at::Tensor>(*t) : std::nullopt;
}

bool Optimizer::host_found_inf(const at::Tensor* found_inf) {
  // The one host read of the foreach path (a device sync on CUDA); the fused path never reads it.
  return found_inf != nullptr && found_inf->item<float>() != 0.0f;
}

c10::Device Optimizer::step_device() const {
  return fused_ ? device_ : c10::Device(at::kCPU);
}

std::string Optimizer::param_name(size_t index) const {
  if (index < names_.size()) return fmt::format("'{}' (#{})", names_[index], index);
  return fmt::format("#{}", index);
}

void Optimizer::save(torch::serialize::OutputArchive& archive) const {
  archive.write("name", c10::IValue(name()));
  archive.write("lr", c10::IValue(lr_));
  archive.write("num_params", c10::IValue(static_cast<int64_t>(state_.size())));
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.exp_avg.defined()) archive.write(state_key(i, "exp_avg"), s.exp_avg.cpu());
    if (s.exp_avg_sq.defined()) archive.write(state_key(i, "exp_avg_sq"), s.exp_avg_sq.cpu());
    if (s.momentum_buffer.defined()) {
      archive.write(state_key(i, "momentum_buffer"), s.momentum_buffer.cpu());
    }
    if (s.step.defined()) archive.write(state_key(i, "step"), s.step.cpu());
  }
}

void Optimizer::load(torch::serialize::InputArchive& archive) {
  const std::string saved_name = read_value(archive, "name").toStringRef();
  if (saved_name != name()) {
    throw CheckpointError("Optimizer::load: the checkpoint holds " + saved_name +
                          " state but the optimizer is " + name());
  }
  const int64_t saved_count = read_value(archive, "num_params").toInt();
  if (saved_count != static_cast<int64_t>(state_.size())) {
    throw CheckpointError(fmt::format(
        "Optimizer::load: the checkpoint has state for {} parameters, the optimizer has {}",
        saved_count, state_.size()));
  }
  std::vector<ParamState> loaded(state_.size());
  for (size_t i = 0; i < state_.size(); ++i) {
    const at::Tensor& p = parameters_at(i);
    auto read_like_param = [&](const char* field, at::Tensor& dst) {
      at::Tensor t;
      if (!archive.try_read(state_key(i, field), t)) return;
      if (t.sizes() != p.sizes()) {
        throw CheckpointError("Optimizer::load: " + std::string(field) + " of parameter " +
                              param_name(i) + " has shape " + c10::str(t.sizes()) +
                              " in the checkpoint, the parameter " + c10::str(p.sizes()));
      }
      dst = t.to(p.device(), p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    };
    read_like_param("exp_avg", loaded[i].exp_avg);
    read_like_param("exp_avg_sq", loaded[i].exp_avg_sq);
    read_like_param("momentum_buffer", loaded[i].momentum_buffer);
    at::Tensor step;
    if (archive.try_read(state_key(i, "step"), step)) {
      loaded[i].step = step.to(step_device(), at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    }
  }
  state_ = std::move(loaded);
  set_lr(read_value(archive, "lr").toDouble());
}

std::unique_ptr<Optimizer> make_optimizer(
    const OptimOptions& options,
    const std::vector<std::pair<std::string, at::Tensor>>& named_parameters, c10::Device device) {
  if (!(options.lr > 0.0)) {  // the config schema's bound
    throw ConfigError(fmt::format("optim.lr must be > 0, got {}", options.lr));
  }
  if (!(options.weight_decay >= 0.0)) {
    throw ConfigError(fmt::format("optim.weight_decay must be >= 0, got {}", options.weight_decay));
  }
  const bool fused = parse_fused(options.fused, device);

  ParamGroup decay{{}, options.weight_decay, 1.0};
  ParamGroup no_decay{{}, 0.0, 1.0};
  std::vector<std::string> decay_names, no_decay_names;
  for (const auto& [name, param] : named_parameters) {
    if (!param.requires_grad()) continue;
    if (options.no_decay_1d && param.dim() < 2) {
      no_decay.params.push_back(param);
      no_decay_names.push_back(name);
    } else {
      decay.params.push_back(param);
      decay_names.push_back(name);
    }
  }
  std::vector<ParamGroup> groups;
  std::vector<std::string> names;
  if (!decay.params.empty()) {
    groups.push_back(std::move(decay));
    names.insert(names.end(), decay_names.begin(), decay_names.end());
  }
  if (!no_decay.params.empty()) {
    groups.push_back(std::move(no_decay));
    names.insert(names.end(), no_decay_names.begin(), no_decay_names.end());
  }
  if (groups.empty()) {
    throw Error(
        fmt::format("make_optimizer: none of the {} parameters requires grad; nothing to optimize",
                    named_parameters.size()));
  }

  std::unique_ptr<Optimizer> optimizer;
  if (options.name == "sgd") {
    SgdOptions sgd;
    sgd.momentum = options.momentum;
    sgd.nesterov = options.nesterov;
    optimizer =
        std::make_unique<Sgd>(std::move(groups), std::move(names), options.lr, sgd, fused, device);
  } else if (options.name == "adam" || options.name == "adamw") {
    if (options.betas.size() != 2) {
      throw ConfigError(
          fmt::format("optim.betas must hold 2 values, got {}", options.betas.size()));
    }
    AdamOptions adam;
    adam.beta1 = options.betas[0];
    adam.beta2 = options.betas[1];
    adam.eps = options.eps;
    adam.decoupled_weight_decay = options.name == "adamw";
    optimizer = std::make_unique<Adam>(std::move(groups), std::move(names), options.lr, adam, fused,
                                       device);
  } else {
    throw ConfigError("optim.name: unknown optimizer '" + options.name +
                      "' (expected sgd, adam or adamw)");
  }
  log::debug("optimizer: {} ({}), {} groups, {} parameters", optimizer->name(),
             fused ? "fused" : "foreach", optimizer->groups().size(),
             optimizer->parameters().size());
  return optimizer;
}

}  // namespace brrr
