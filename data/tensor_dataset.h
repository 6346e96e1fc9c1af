#pragma once
// In-memory named tensors indexed on dim 0, for tests and C++ users with data already in memory.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "data/dataset.h"

namespace brrr {

class TensorDataset : public Dataset {
 public:
  /// Every tensor must have >= 1 dimension and the same size(0); DataError naming the key and the
  /// sizes otherwise. Tensors are kept as contiguous CPU tensors.
  explicit TensorDataset(std::map<std::string, at::Tensor> tensors);

  int64_t size() const override { return size_; }
  /// {key: tensors[key][index]} (a copy, so callers may modify it).
  Sample get(int64_t index, Rng& rng) const override;
  std::string describe() const override;

 private:
  std::map<std::string, at::Tensor> tensors_;
  int64_t size_ = 0;
};

}  // namespace brrr
