#include "data/tensor_dataset.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {

TensorDataset::TensorDataset(std::map<std::string, at::Tensor> tensors) {
  if (tensors.empty()) throw DataError("TensorDataset: needs at least one tensor");
  std::string first_key;
  for (auto& [key, tensor] : tensors) {
    if (!tensor.defined() || tensor.dim() == 0) {
      throw DataError("TensorDataset: tensor '" + key + "' must have at least one dimension");
    }
    if (first_key.empty()) {
      first_key = key;
      size_ = tensor.size(0);
    } else if (tensor.size(0) != size_) {
      throw DataError(
          fmt::format("TensorDataset: tensor '{}' has {} rows (shape [{}]) but '{}' "
                      "has {}",
                      key, tensor.size(0), fmt::join(tensor.sizes(), ", "), first_key, size_));
    }
    tensors_[key] = tensor.cpu().contiguous();
  }
}

Sample TensorDataset::get(int64_t index, Rng& /*rng*/) const {
  if (index < 0 || index >= size_) {
    throw DataError(fmt::format("TensorDataset: index {} out of range [0, {})", index, size_));
  }
  Sample sample;
  for (const auto& [key, tensor] : tensors_) sample[key] = tensor[index].clone();
  return sample;
}

std::string TensorDataset::describe() const {
  std::vector<std::string> parts;
  for (const auto& [key, tensor] : tensors_) {
    parts.push_back(fmt::format("{} {} [{}]", key, std::string(c10::toString(tensor.scalar_type())),
                                fmt::join(tensor.sizes().slice(1), ", ")));
  }
  return fmt::format("tensors: {} examples of {}", size_, fmt::join(parts, ", "));
}

}  // namespace brrr
