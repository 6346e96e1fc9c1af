#include "trainer/optim/grad_clip.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "core/error.h"
#include "trainer/optim/optimizer.h"

namespace brrr {
namespace {

c10::Dict<c10::IValue, c10::IValue> load_golden(const std::string& file) {
  const std::string path = std::string(BRRR_GOLDEN_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing golden file " + path + " (tests/golden/make_all.py)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

TEST(GradClipTest, MatchesTorchClipGradNorm) {
  const auto golden = load_golden("optim_clip.pt");
  for (const char* label : {"clipped", "unclipped"}) {
    const auto c = golden.at(label).toGenericDict();
    const auto grads = c.at("grads").toList();
    const auto clipped = c.at("clipped").toList();
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < grads.size(); ++i) {
      const torch::Tensor g = grads.get(i).toTensor();
      params.push_back(torch::zeros_like(g).requires_grad_(true));
      params.back().mutable_grad() = g.clone();
    }
    const auto norm = clip_grad_norm(params, c.at("max_norm").toDouble());
    EXPECT_EQ(norm.dim(), 0);
    EXPECT_FLOAT_EQ(norm.item<float>(), c.at("total_norm").toTensor().item<float>()) << label;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params[i].grad(), clipped.get(i).toTensor(), 1e-6, 0.0))
          << label << " grad " << i;
    }
  }
}

TEST(GradClipTest, NonFiniteNormLeavesParamsUntouchedWhenTheStepIsSkipped) {
  std::vector<std::pair<std::string, torch::Tensor>> named = {
      {"w", torch::ones({2, 2}, torch::requires_grad())},
      {"b", torch::ones({2}, torch::requires_grad())}};
  named[0].second.mutable_grad() = torch::full({2, 2}, INFINITY);
  named[1].second.mutable_grad() = torch::ones({2});
  OptimOptions o;
  o.name = "sgd";
  o.lr = 0.1;
  auto opt = make_optimizer(o, named, torch::kCPU);
  const auto norm = clip_grad_norm(opt->parameters(), 1.0);
  EXPECT_TRUE(std::isinf(norm.item<float>()));
  // The trainer's skip signal for a non-finite step (the GradScaler's found_inf in fp16).
  const auto found_inf = (~torch::isfinite(norm)).to(torch::kFloat);
  opt->step(nullptr, &found_inf);
  for (const auto& [name, p] : named) EXPECT_TRUE(torch::equal(p, torch::ones_like(p))) << name;
}

TEST(GradClipTest, NormWithoutClippingAndEdgeCases) {
  auto p = torch::zeros({2}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});
  EXPECT_FLOAT_EQ(total_grad_norm({p}).item<float>(), 5.0f);
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({3.0f, 4.0f})));  // untouched
  auto no_grad = torch::zeros({2}, torch::requires_grad());
  EXPECT_EQ(clip_grad_norm({no_grad}, 1.0).item<float>(), 0.0f);
  EXPECT_THROW(clip_grad_norm({p}, 0.0), Error);
}

}  // namespace
}  // namespace brrr
