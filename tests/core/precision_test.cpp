#include "core/precision.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"

namespace brrr {
namespace {

TEST(PrecisionTest, ParsesAndPrintsEveryName) {
  for (const char* name : {"fp32", "tf32", "bf16", "fp16"}) {
    EXPECT_EQ(to_string(parse_precision(name)), name);
  }
  EXPECT_EQ(parse_precision("bf16"), Precision::kBF16);
}

TEST(PrecisionTest, UnknownNameThrowsConfigErrorNamingKeyAndValue) {
  try {
    parse_precision("fp8");
    FAIL() << "parse_precision accepted fp8";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.precision"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
  }
}

TEST(PrecisionTest, AutocastDtypeAndScalingFollowThePolicy) {
  EXPECT_FALSE(autocast_dtype(Precision::kFP32).has_value());
  EXPECT_FALSE(autocast_dtype(Precision::kTF32).has_value());
  EXPECT_EQ(autocast_dtype(Precision::kBF16), at::kBFloat16);
  EXPECT_EQ(autocast_dtype(Precision::kFP16), at::kHalf);
  EXPECT_TRUE(needs_grad_scaling(Precision::kFP16));
  EXPECT_FALSE(needs_grad_scaling(Precision::kBF16));
}

TEST(AutocastGuardTest, Bf16OnCpuMakesMatmulBf16InsideAndRestoresAfter) {
  const auto a = torch::randn({4, 8});
  const auto b = torch::randn({8, 3});
  ASSERT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  {
    AutocastGuard guard(Precision::kBF16, torch::kCPU);
    EXPECT_TRUE(guard.active());
    EXPECT_EQ(torch::mm(a, b).scalar_type(), at::kBFloat16);
    // Weights stay fp32: autocast casts copies, never the inputs.
    EXPECT_EQ(a.scalar_type(), at::kFloat);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(torch::mm(a, b).scalar_type(), at::kFloat);
}

TEST(AutocastGuardTest, NestedGuardsRestoreTheOuterDtype) {
  const auto a = torch::randn({2, 2});
  AutocastGuard outer(Precision::kBF16, torch::kCPU);
  {
    AutocastGuard inner(Precision::kFP16, torch::kCPU);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kHalf);
  }
  EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kBFloat16);
  EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kBFloat16);
}

TEST(AutocastGuardTest, Fp32GuardChangesNothing) {
  const auto a = torch::randn({2, 2});
  AutocastGuard guard(Precision::kFP32, torch::kCPU);
  EXPECT_FALSE(guard.active());
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kFloat);
}

TEST(AutocastGuardTest, Bf16OnCudaMakesMatmulBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto a = torch::randn({4, 4}, torch::kCUDA);
  {
    AutocastGuard guard(Precision::kBF16, torch::kCUDA);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kBFloat16);
    // CPU autocast is a separate state and stays off.
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));
  EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kFloat);
}

TEST(Tf32Test, TogglesCublasCudnnFlagsAndMatmulPrecision) {
  set_tf32(true);
  EXPECT_TRUE(at::globalContext().allowTF32CuBLAS());
  EXPECT_TRUE(at::globalContext().allowTF32CuDNN());
  EXPECT_EQ(at::globalContext().float32MatmulPrecision(), at::Float32MatmulPrecision::HIGH);
  set_tf32(false);
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
  EXPECT_FALSE(at::globalContext().allowTF32CuDNN());
  EXPECT_EQ(at::globalContext().float32MatmulPrecision(), at::Float32MatmulPrecision::HIGHEST);
}

}  // namespace
}  // namespace brrr
