#pragma once
// Copying weights into a module by name (PyTorch's `load_state_dict(strict=True)`), so that
// `torch.save(model.state_dict(), path)` from Python can be imported into a brrr model.
//
// Invariant: the module's state is its named parameters followed by its named buffers, with
// PyTorch's dotted names ("layer1.0.bn1.running_mean"). A name whose tensor is the same tensor as
// another name's (tied weights, e.g. GPT's lm_head.weight = transformer.wte.weight) may be absent
// from the source: it is filled through its twin.
#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <vector>

namespace brrr {

/// The module's parameters and buffers by dotted name (tensors alias the module's: no copy).
std::map<std::string, at::Tensor> named_state(const torch::nn::Module& module);

/// The keys a non-strict load_state_dict() left out.
struct LoadReport {
  std::vector<std::string> missing;     // in the module, not in the source: left as they were
  std::vector<std::string> unexpected;  // in the source, not in the module: ignored
};

/// Copies every tensor of `state` into the parameter or buffer of `module` with the same name
/// (values converted to the destination's dtype and device; autograd not recorded).
/// strict: throws brrr::Error listing all missing and unexpected keys; otherwise they are
/// returned. A shape mismatch is always an error naming the key and both shapes. Nothing is
/// copied unless the load can be done whole.
LoadReport load_state_dict(torch::nn::Module& module,
                           const std::map<std::string, at::Tensor>& state, bool strict = true);

/// Same, from what torch::pickle_load returns for a Python `torch.save(model.state_dict())`
/// (keys must be strings and values tensors; anything else is an error naming the key).
void load_state_dict(torch::nn::Module& module, const c10::Dict<c10::IValue, c10::IValue>& state);

/// Reads a file written by Python's `torch.save(dict_of_tensors, path)` (string keys, tensor
/// values) — e.g. a state_dict. Throws brrr::Error naming the file when it cannot be read.
std::map<std::string, at::Tensor> load_tensor_dict(const std::string& path);

}  // namespace brrr
