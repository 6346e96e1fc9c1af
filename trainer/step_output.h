#pragma once
// What a training or validation step returns (Trainer::training_step / validation_step).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace brrr {

struct StepOutput {
  /// Mean loss over the micro-batch, 0-dim, attached to the graph in training.
  at::Tensor loss;
  /// Named 0-dim tensors summed over the batch (e.g. "correct"); the evaluator divides by examples.
  std::map<std::string, at::Tensor> sums;
  /// Examples in the batch (for averaging) and tokens (for tokens/s; 0 if not a language model).
  int64_t examples = 0;
  int64_t tokens = 0;
};

}  // namespace brrr
