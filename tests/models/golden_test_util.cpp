#include "tests/models/golden_test_util.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>
#include <vector>

#include "models/state_dict.h"

namespace brrr::test {

c10::Dict<c10::IValue, c10::IValue> load_golden(const std::string& file) {
  const std::string path = std::string(BRRR_GOLDEN_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("golden file " + path +
                             " is missing: run tests/golden/make_all.py --out " BRRR_GOLDEN_DIR);
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

int64_t golden_count(const std::string& key) {
  static const auto counts = load_tensor_dict(std::string(BRRR_GOLDEN_DIR) + "/models_counts.pt");
  return counts.at(key).item<int64_t>();
}

void expect_close(const at::Tensor& actual, const at::Tensor& expected, const std::string& what,
                  double rtol, double atol) {
  ASSERT_TRUE(actual.defined()) << what << ": undefined";
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const at::Tensor a = actual.detach();
  const at::Tensor e = expected.detach().to(a.scalar_type());
  if (at::allclose(a, e, rtol, atol)) return;
  ADD_FAILURE() << what << ": not allclose(rtol " << rtol << ", atol " << atol
                << "): max abs error "
                << (a.to(at::kDouble) - e.to(at::kDouble)).abs().max().item<double>()
                << ", max |expected| " << e.abs().max().item<double>();
}

void expect_matches_golden(Model& model, const c10::Dict<c10::IValue, c10::IValue>& golden,
                           double rtol, double atol) {
  load_state_dict(model, golden.at("state").toGenericDict());
  const at::Tensor input = golden.at("input").toTensor();
  const at::Tensor target = golden.at("target").toTensor();

  model.train();
  model.zero_grad();
  const at::Tensor logits = model.forward(input);
  expect_close(logits, golden.at("logits_train").toTensor(), "train-mode logits", rtol, atol);
  const at::Tensor loss =
      at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
  expect_close(loss, golden.at("loss").toTensor(), "loss", rtol, atol);
  loss.backward();

  const auto grads = golden.at("grads").toGenericDict();
  const auto params = model.named_parameters(/*recurse=*/true);
  EXPECT_EQ(params.size(), grads.size()) << "parameter count differs from PyTorch's";
  for (const auto& p : params) {
    ASSERT_TRUE(grads.contains(p.key())) << "no PyTorch gradient for " << p.key();
    expect_close(p.value().grad(), grads.at(p.key()).toTensor(), "grad of " + p.key(), rtol, atol);
  }
  const auto buffers = model.named_buffers(/*recurse=*/true);
  for (const auto& entry : golden.at("buffers_after").toGenericDict()) {
    const std::string name = entry.key().toStringRef();
    const at::Tensor* mine = buffers.find(name);
    ASSERT_NE(mine, nullptr) << "no buffer " << name;
    expect_close(*mine, entry.value().toTensor(), "buffer after train forward " + name, rtol, atol);
  }

  model.eval();
  at::NoGradGuard no_grad;
  expect_close(model.forward(input), golden.at("logits_eval").toTensor(), "eval-mode logits", rtol,
               atol);
}

void expect_reproducible_gradients(Model& model, const std::function<at::Tensor()>& loss,
                                   int repeats) {
  auto gradients = [&] {
    model.zero_grad();
    loss().backward();
    std::vector<std::pair<std::string, at::Tensor>> g;
    for (const auto& p : model.named_parameters(/*recurse=*/true)) {
      g.emplace_back(p.key(), p.value().grad().clone());
    }
    return g;
  };
  const auto first = gradients();
  for (int repeat = 1; repeat <= repeats; ++repeat) {
    const auto again = gradients();
    ASSERT_EQ(again.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_TRUE(at::equal(again[i].second, first[i].second))
          << "gradient of " << first[i].first << " differs in repeat " << repeat;
    }
  }
}

}  // namespace brrr::test
