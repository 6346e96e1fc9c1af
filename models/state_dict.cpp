#include "models/state_dict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/serialize.h>

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace brrr {
namespace {

std::string shape_str(const at::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

std::map<std::string, at::Tensor> to_tensor_map(const c10::Dict<c10::IValue, c10::IValue>& dict,
                                                const std::string& what) {
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : dict) {
    if (!entry.key().isString()) {
      throw Error(fmt::format("{}: a key is a {}, expected a string", what, entry.key().tagKind()));
    }
    const std::string key = entry.key().toStringRef();
    if (!entry.value().isTensor()) {
      throw Error(fmt::format("{}: value of key '{}' is a {}, expected a tensor", what, key,
                              entry.value().tagKind()));
    }
    out.emplace(key, entry.value().toTensor());
  }
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> named_state(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) state.emplace(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) state.emplace(b.key(), b.value());
  return state;
}

void load_state_dict(torch::nn::Module& module, const std::map<std::string, at::Tensor>& state) {
  const auto own = named_state(module);
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
  // A missing name is fine when its tensor is also reachable under a name that is present.
  std::map<const c10::TensorImpl*, bool> impl_provided;
  for (const auto& [name, tensor] : own) {
    impl_provided[tensor.unsafeGetTensorImpl()] |= state.count(name) > 0;
  }
  for (const auto& [name, tensor] : own) {
    if (state.count(name) == 0 && !impl_provided[tensor.unsafeGetTensorImpl()]) {
      missing.push_back(name);
    }
  }
  for (const auto& entry : state) {
    if (own.count(entry.first) == 0) unexpected.push_back(entry.first);
  }
  if (!missing.empty() || !unexpected.empty()) {
    throw Error(fmt::format(
        "load_state_dict into {}: {} missing key(s) [{}], {} unexpected key(s) [{}]", module.name(),
        missing.size(), fmt::join(missing, ", "), unexpected.size(), fmt::join(unexpected, ", ")));
  }
  for (const auto& [name, src] : state) {
    const at::Tensor& dst = own.at(name);
    if (!src.defined() || src.sizes() != dst.sizes()) {
      throw Error(fmt::format(
          "load_state_dict into {}: key '{}' has shape {} in the source but {} "
          "in the model",
          module.name(), name, src.defined() ? shape_str(src) : "undefined", shape_str(dst)));
    }
  }
  at::NoGradGuard no_grad;
  for (const auto& [name, src] : state) own.at(name).copy_(src);
}

void load_state_dict(torch::nn::Module& module, const c10::Dict<c10::IValue, c10::IValue>& state) {
  load_state_dict(module, to_tensor_map(state, "load_state_dict into " + module.name()));
}

std::map<std::string, at::Tensor> load_tensor_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open tensor file '{}'", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw Error(fmt::format("cannot read tensor file '{}' (expected Python torch.save output): {}",
                            path, e.what_without_backtrace()));
  }
  if (!value.isGenericDict()) {
    throw Error(fmt::format("tensor file '{}' holds a {}, expected a dict of tensors", path,
                            value.tagKind()));
  }
  return to_tensor_map(value.toGenericDict(), "tensor file '" + path + "'");
}

}  // namespace brrr
