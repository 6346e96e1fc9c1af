#include "models/resnet.h"

#include <gtest/gtest.h>

#include <torch/nn/functional/loss.h>

#include "core/determinism.h"
#include "core/precision.h"
#include "tests/models/golden_test_util.h"

namespace brrr {
namespace {

ModelOptions resnet_options(const std::string& stem, int64_t classes, int64_t image_size) {
  ModelOptions o;
  o.stem = stem;
  o.in_channels = 3;
  o.num_classes = classes;
  o.image_size = image_size;
  return o;
}

// The golden files come from the same architecture written in plain PyTorch with torchvision's
// names; 2x3x64x64 input, 7 classes, BN affine and running stats randomised before saving.
TEST(ResNetTest, ResNet18MatchesPyTorch) {
  ResNet model(resnet_options("imagenet", 7, 64), 18);
  const auto golden = test::load_golden("models_resnet18.pt");
  test::expect_matches_golden(model, golden);
  EXPECT_DOUBLE_EQ(model.flops_per_example(), 6.0 * golden.at("macs").toTensor().item<double>());
}

TEST(ResNetTest, ResNet50MatchesPyTorch) {
  ResNet model(resnet_options("imagenet", 7, 64), 50);
  const auto golden = test::load_golden("models_resnet50.pt");
  test::expect_matches_golden(model, golden);
  EXPECT_DOUBLE_EQ(model.flops_per_example(), 6.0 * golden.at("macs").toTensor().item<double>());
}

TEST(ResNetTest, ImageNetConfigurationsHaveTorchvisionSizes) {
  ResNet r18(resnet_options("imagenet", 1000, 224), 18);
  EXPECT_EQ(count_parameters(r18), 11'689'512);
  EXPECT_DOUBLE_EQ(r18.flops_per_example(),
                   6.0 * static_cast<double>(test::golden_count("resnet18_macs_224")));
  ResNet r50(resnet_options("imagenet", 1000, 224), 50);
  EXPECT_EQ(count_parameters(r50), 25'557'032);
  EXPECT_DOUBLE_EQ(r50.flops_per_example(),
                   6.0 * static_cast<double>(test::golden_count("resnet50_macs_224")));
  EXPECT_NEAR(r50.flops_per_example() / 6.0, 4.09e9, 0.01e9);  // torchvision: 4.09 GMACs
}

TEST(ResNetTest, SmallStemKeepsResolutionAndMatchesPyTorchSizes) {
  for (int depth : {18, 50}) {
    SCOPED_TRACE(depth);
    const std::string key = "resnet" + std::to_string(depth) + "_small";
    ResNet model(resnet_options("small", 10, 32), depth);
    EXPECT_EQ(count_parameters(model), test::golden_count(key + "_params"));
    EXPECT_DOUBLE_EQ(model.flops_per_example(),
                     6.0 * static_cast<double>(test::golden_count(key + "_macs_32")));
  }
  ResNet model(resnet_options("small", 10, 32), 18);
  model.eval();
  EXPECT_EQ(model.forward(torch::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(ResNetTest, ConvolutionsAreKaimingNormalFanOut) {
  torch::manual_seed(3);
  ResNet model(resnet_options("imagenet", 10, 224), 18);
  // layer4.0.conv2: 512 -> 512, 3x3; fan_out = 512 * 9, std = sqrt(2 / fan_out).
  const at::Tensor w = model.named_parameters()["layer4.0.conv2.weight"];
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / (512 * 9)),
              0.01 * std::sqrt(2.0 / (512 * 9)));
  EXPECT_TRUE(model.named_parameters()["layer1.0.bn1.weight"].equal(torch::ones({64})));
}

// train.deterministic on the GPU: a ResNet-18 training step (bf16 autocast, channels-last input,
// cuDNN's convolutions and batch norm, max pool, the mean pool, cross-entropy) gives the same
// gradients bit for bit every time, and no op of it raises for lacking a deterministic algorithm.
TEST(ResNetTest, CudaDeterministicTrainingStepIsReproducibleBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const DeterministicScope deterministic;
  torch::manual_seed(5);
  ResNet model(resnet_options("imagenet", 10, 64), 18);
  model.to(torch::kCUDA);
  model.train();
  const at::Tensor images =
      torch::randn({16, 3, 64, 64}, torch::kCUDA).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor labels =
      torch::randint(0, 10, {16}, torch::dtype(at::kLong).device(torch::kCUDA));
  test::expect_reproducible_gradients(model, [&] {
    const AutocastGuard bf16(Precision::kBF16, torch::kCUDA);
    return torch::nn::functional::cross_entropy(model.forward(images), labels);
  });
}

}  // namespace
}  // namespace brrr
