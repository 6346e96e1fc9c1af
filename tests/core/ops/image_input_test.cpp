// image_input: the reference against the formula (double precision), errors, and on CUDA the
// kernel against the reference on fresh random inputs with poisoned outputs, both layouts, every
// output dtype, odd sizes.
#include "core/ops/image_input.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <random>

#include "core/error.h"

namespace brrr {
namespace {

TEST(ImageInputTest, ReferenceMatchesTheFormula) {
  at::Tensor images = at::randint(0, 256, {2, 3, 4, 5}, at::kByte);
  const std::vector<double> mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};
  at::Tensor got = normalize_images(images, mean, std, at::kFloat);
  at::Tensor ref =
      (images.to(at::kDouble) / 255.0 - at::tensor(mean, at::kDouble).view({1, 3, 1, 1})) /
      at::tensor(std, at::kDouble).view({1, 3, 1, 1});
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_LT((got.to(at::kDouble) - ref).abs().max().item<double>(), 1e-5);
  at::Tensor plain = normalize_images(images, {}, {}, at::kBFloat16);
  EXPECT_EQ(plain.scalar_type(), at::kBFloat16);
  EXPECT_LT((plain.to(at::kDouble) - images.to(at::kDouble) / 255.0).abs().max().item<double>(),
            4e-3);
  EXPECT_THROW(normalize_images(images, {0.5, 0.5}, {0.5, 0.5}, at::kFloat), DataError);
  EXPECT_THROW(normalize_images(images.to(at::kFloat), {}, {}, at::kFloat), DataError);
}

TEST(ImageInputTest, ChannelsLastOutputHasTheSameValues) {
  const at::Tensor images = at::randint(0, 256, {3, 3, 7, 9}, at::kByte);
  const ImageNormalizer norm({0.5, 0.4, 0.3}, {0.2, 0.25, 0.3});
  const at::Tensor nchw = norm(images, at::kFloat);
  const at::Tensor nhwc = norm(images, at::kFloat, at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(nhwc.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(at::equal(nchw, nhwc));
}

TEST(ImageInputTest, BadArgumentsNameWhatIsWrong) {
  const at::Tensor images = at::zeros({2, 3, 4, 4}, at::kByte);
  const at::Tensor scale = at::ones({3}), shift = at::zeros({3});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              image_input(images.to(at::kFloat), scale, shift, at::kFloat,
                          at::MemoryFormat::Contiguous);
            }).find("expected uint8 images (B, C, H, W), got Float [2, 3, 4, 4]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              image_input(images, at::ones({2}), shift, at::kFloat, at::MemoryFormat::Contiguous);
            }).find("scale/shift must be float32 (3,) or (1,)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              image_input(images, scale, shift, at::kDouble, at::MemoryFormat::Contiguous);
            }).find("output dtype must be float32, bfloat16 or float16, got Double"),
            std::string::npos);
}

// The CUDA kernel against the reference on the GPU: fresh random images every case, outputs
// poisoned (the allocator's next block of that size is filled with NaN first), exact equality.
TEST(ImageInputCudaTest, KernelEqualsTheReferenceBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::image_input_cuda_built());
  const uint64_t seed = std::random_device{}();
  at::manual_seed(seed);  // fresh inputs every run; the seed is printed on a failure
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 3, 1, 1}, {2, 3, 17, 31}, {5, 1, 28, 28}, {3, 4, 33, 65}, {64, 3, 224, 224}};
  for (const auto& shape : shapes) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
        const auto cuda = at::TensorOptions().device(at::kCUDA);
        const at::Tensor x = at::randint(0, 256, shape, cuda.dtype(at::kByte));
        const int64_t c = shape[1];
        const at::Tensor scale = at::rand({c}, cuda.dtype(at::kFloat)).add_(0.001);
        const at::Tensor shift = at::randn({c}, cuda.dtype(at::kFloat));
        {
          at::Tensor poison = at::empty(shape, cuda.dtype(dtype).memory_format(format));
          poison.fill_(std::numeric_limits<float>::quiet_NaN());
        }
        const at::Tensor got = image_input(x, scale, shift, dtype, format);
        const at::Tensor want = image_input_reference(x, scale, shift, dtype, format);
        ASSERT_EQ(got.scalar_type(), dtype);
        ASSERT_TRUE(got.is_contiguous(format)) << at::str(shape);
        ASSERT_TRUE(at::equal(got, want))
            << "shape " << at::str(shape) << " dtype " << dtype << " max diff "
            << (got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<float>();
      }
    }
  }
}

}  // namespace
}  // namespace brrr
