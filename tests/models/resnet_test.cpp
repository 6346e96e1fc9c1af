#include "models/resnet.h"

#include <gtest/gtest.h>

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <cstdio>

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

// model.fused on the GPU: a ResNet whose norms run as ops::batch_norm_act (cuDNN's fused batch
// norm + ReLU, + the shortcut add) computes the unfused model's step. Both under fp16 autocast on
// channels-last batches, from the same weights, against the unfused model in float32: the fused
// model's gradients are as close to float32's as the unfused fp16 model's are. (Reduced precision
// alone moves a ResNet's first-step gradients a lot: ResNet-18 in bf16 on the CPU lands a median
// 31 % from float32 per parameter, ResNet-50 125 %, so the comparison is with the unfused model's
// own distance, in fp16, whose rounding is 8x finer than bf16's; a norm wired wrongly, or a
// wrong gradient, lands at ~100 %.) The losses of 8 SGD steps stay within 2 % of the unfused
// fp16 model's, and the running statistics agree after the first step.
TEST(ResNetTest, CudaFusedNormsTrainAsTheUnfusedModel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(11);
  ModelOptions fused_options = resnet_options("small", 10, 32);
  ModelOptions plain_options = fused_options;
  plain_options.fused = "false";
  ResNet fused(fused_options, 18), plain(plain_options, 18), fp32(plain_options, 18);
  ASSERT_EQ(fused.fused_ops(), std::vector<std::string>{"batch_norm_act"});
  ASSERT_TRUE(plain.fused_ops().empty());
  {
    torch::NoGradGuard no_grad;  // the same weights and buffers
    const auto src = plain.named_parameters();
    for (ResNet* m : {&fused, &fp32}) {
      for (auto& p : m->named_parameters()) p.value().copy_(src[p.key()]);
    }
  }
  const std::vector<ResNet*> models = {&fused, &plain, &fp32};
  for (ResNet* m : models) {
    m->to(torch::kCUDA);
    for (auto& p : m->parameters()) {
      if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
    }
    m->train();
  }
  std::vector<torch::optim::SGD> opts;
  for (ResNet* m : models) {
    opts.emplace_back(m->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  }
  // All of a model's gradients as one float64 vector, in parameter order.
  auto all_grads = [](ResNet& m) {
    std::vector<at::Tensor> g;
    for (const auto& p : m.parameters()) g.push_back(p.grad().to(at::kDouble).flatten());
    return at::cat(g);
  };
  constexpr double kScale = 1024.0;  // keeps fp16's activation gradients out of the subnormals
  for (int step = 0; step < 8; ++step) {
    const at::Tensor labels =
        torch::randint(0, 10, {64}, torch::dtype(at::kLong).device(torch::kCUDA));
    // A learnable batch: class k brightens rows 3k..3k+2.
    at::Tensor images = torch::randn({64, 3, 32, 32}, torch::kCUDA);
    const at::Tensor rows = torch::arange(32, torch::kCUDA).div(3, "floor");
    images.add_(rows.view({1, 1, 32, 1}).eq(labels.view({64, 1, 1, 1})).to(at::kFloat) * 2.0);
    images = images.contiguous(at::MemoryFormat::ChannelsLast);
    std::vector<double> losses;
    for (ResNet* m : models) {
      at::Tensor loss;
      {
        const AutocastGuard autocast(m == &fp32 ? Precision::kFP32 : Precision::kFP16,
                                     torch::kCUDA);
        loss = torch::nn::functional::cross_entropy(m->forward(images), labels);
      }
      (loss * kScale).backward();
      for (auto& p : m->parameters()) p.mutable_grad().div_(kScale);
      losses.push_back(loss.item<double>());
    }
    EXPECT_NEAR(losses[0], losses[1], 0.02 * losses[1]) << "step " << step;
    if (step == 0) {
      const at::Tensor want = all_grads(fp32);
      const double fused_err = ((all_grads(fused) - want).norm() / want.norm()).item<double>();
      const double plain_err = ((all_grads(plain) - want).norm() / want.norm()).item<double>();
      std::printf("step 0: gradients' distance from float32: fused fp16 %.4f, unfused %.4f\n",
                  fused_err, plain_err);
      EXPECT_LT(fused_err, 1.5 * plain_err + 0.02);
      const auto b = plain.named_buffers();
      for (const auto& buf : fused.named_buffers()) {
        EXPECT_TRUE(at::allclose(buf.value().to(at::kDouble), b[buf.key()].to(at::kDouble), 1e-2,
                                 1e-3))
            << buf.key();
      }
    }
    for (auto& opt : opts) {
      opt.step();
      opt.zero_grad();
    }
  }
}

}  // namespace
}  // namespace brrr
