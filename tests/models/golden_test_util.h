#pragma once
// Helpers of the models golden tests: reading the files of tests/golden/gen_models.py and
// comparing a brrr model against the PyTorch run recorded there.
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <string>

#include "models/model.h"

namespace brrr::test {

/// Reads BRRR_GOLDEN_DIR/<file> (a Python torch.save'd dict). Throws if it is missing.
c10::Dict<c10::IValue, c10::IValue> load_golden(const std::string& file);

/// The int64 scalar `key` of BRRR_GOLDEN_DIR/models_counts.pt.
int64_t golden_count(const std::string& key);

/// EXPECTs same shape and allclose(rtol, atol); the message names `what` and the max error.
void expect_close(const at::Tensor& actual, const at::Tensor& expected, const std::string& what,
                  double rtol = 1e-4, double atol = 1e-5);

/// Loads golden["state"] into `model`, then checks against PyTorch: train-mode logits and loss,
/// the gradient of every parameter (and that the parameter sets are equal), BatchNorm running
/// statistics after the train-mode forward, and eval-mode logits.
void expect_matches_golden(Model& model, const c10::Dict<c10::IValue, c10::IValue>& golden,
                           double rtol = 1e-4, double atol = 1e-5);

/// Runs `loss` (a forward that returns the loss, under whatever guards it sets) and its backward
/// 1 + `repeats` times on `model`, and EXPECTs every parameter's gradient to be the same bits each
/// time (the message names the parameter and the repeat).
void expect_reproducible_gradients(Model& model, const std::function<at::Tensor()>& loss,
                                   int repeats = 3);

}  // namespace brrr::test
