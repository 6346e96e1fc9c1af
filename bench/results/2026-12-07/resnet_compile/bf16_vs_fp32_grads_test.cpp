// The CPU experiment behind bench/RESULTS.md section 2's 2026-12-07 update: how far the *unfused*
// ResNet's first-step gradients move between bf16 autocast and float32 (same weights, same batch).
// Not part of the suites; to rerun, copy into tests/models/ and run
//   ninja -C build tests/models_tests && build/tests/models_tests --gtest_filter='Bf16VsFp32*'
// (bf16_vs_fp32_grads.txt: depth 50 at 64 px with the imagenet stem on a random batch, a median
// 125 % per parameter, up to 155 %, losses 2.56 vs 2.61; depth 18 at 32 px with the small stem on
// a learnable batch, a median 31 %, up to 39 %).
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include <cstdio>

#include "core/precision.h"
#include "models/resnet.h"

namespace brrr {

void compare(int depth, const std::string& stem, int64_t side, bool learnable) {
  torch::manual_seed(11);
  ModelOptions o;
  o.stem = stem;
  o.in_channels = 3;
  o.num_classes = 10;
  o.image_size = side;
  o.fused = "false";
  ResNet a(o, depth), b(o, depth);
  {
    torch::NoGradGuard no_grad;
    auto src = a.named_parameters();
    for (auto& p : b.named_parameters()) p.value().copy_(src[p.key()]);
  }
  a.train();
  b.train();
  const at::Tensor labels = torch::randint(0, 10, {32}, torch::kLong);
  at::Tensor images = torch::randn({32, 3, side, side});
  if (learnable) {  // class k brightens a band of rows
    const int64_t band = side / 10;
    for (int i = 0; i < 32; ++i) images[i].narrow(1, labels[i].item<int>() * band, band).add_(2.0);
  }
  for (ResNet* m : {&a, &b}) {
    at::Tensor loss;
    {
      const AutocastGuard g(m == &a ? Precision::kFP32 : Precision::kBF16, torch::kCPU);
      loss = torch::nn::functional::cross_entropy(m->forward(images), labels);
    }
    loss.backward();
    std::printf("resnet%d %s: loss %.6f\n", depth, m == &a ? "fp32" : "bf16", loss.item<double>());
  }
  auto pa = a.named_parameters();
  for (auto& p : b.named_parameters()) {
    const at::Tensor x = p.value().grad().to(at::kDouble), y = pa[p.key()].grad().to(at::kDouble);
    std::printf("%-32s %.3f\n", p.key().c_str(), ((x - y).norm() / y.norm()).item<double>());
  }
}

TEST(Bf16VsFp32, ResNet50RandomBatch) { compare(50, "imagenet", 64, false); }
TEST(Bf16VsFp32, ResNet18LearnableBatch) { compare(18, "small", 32, true); }

}  // namespace brrr
