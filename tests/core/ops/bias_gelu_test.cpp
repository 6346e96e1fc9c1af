// bias_gelu: the reference and the autograd Function's CPU stages against the unfused ATen
// composition (at::gelu(x + bias, "tanh")) and against finite differences, errors; on CUDA the
// kernels against the reference on fresh random inputs, D = 3072 and odd D, odd N, misaligned
// rows, bias in x's dtype or float32, and run-to-run identical dbias.
#include "core/ops/bias_gelu.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "core/error.h"
#include "tests/core/ops/ops_test_util.h"

namespace brrr {
namespace {

using test::rel_error;
using Op = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

const Op kFunction = [](const at::Tensor& x, const at::Tensor& b) {
  return detail::bias_gelu_function(x, b);
};
const Op kReference = [](const at::Tensor& x, const at::Tensor& b) {
  return bias_gelu_reference(x, b);
};
const Op kUnfused = [](const at::Tensor& x, const at::Tensor& b) {
  return at::gelu(x + b, "tanh");
};

// {y, dx, dbias} of op for the loss sum(y * dy).
std::vector<at::Tensor> run(const Op& op, const at::Tensor& x, const at::Tensor& bias,
                            const at::Tensor& dy) {
  const at::Tensor xl = x.clone().requires_grad_(true), bl = bias.clone().requires_grad_(true);
  const at::Tensor y = op(xl, bl);
  (y.to(at::kDouble) * dy.to(at::kDouble)).sum().backward();
  return {y.detach(), xl.grad(), bl.grad()};
}

const char* const kNames[] = {"y", "dx", "dbias"};

void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                  double tol) {
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << kNames[i];
    EXPECT_LT(rel_error(got[i], want[i]), tol) << kNames[i];
  }
}

TEST(BiasGeluTest, CpuPathsEqualTheUnfusedComposition) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (int64_t width : {3072, 1001}) {
    const at::Tensor x = at::randn({11, width}) * 3, bias = at::randn({width});
    const at::Tensor dy = at::randn({11, width});
    const auto want = run(kUnfused, x, bias, dy);
    expect_close(run(kReference, x, bias, dy), want, 1e-6);
    expect_close(run(kFunction, x, bias, dy), want, 1e-6);
  }
}

TEST(BiasGeluTest, GradientsMatchFiniteDifferences) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor x = at::randn({4, 6}, at::kDouble) * 2, bias = at::randn({6}, at::kDouble);
  const at::Tensor dy = at::randn({4, 6}, at::kDouble);
  for (const auto& [name, op] :
       {std::pair{"function", kFunction}, std::pair{"reference", kReference}}) {
    const auto got = run(op, x, bias, dy);
    at::Tensor px = x.clone(), pb = bias.clone();
    auto loss = [&] { return (op(px, pb) * dy).sum(); };
    EXPECT_LT(rel_error(got[1], test::numeric_grad(loss, px)), 1e-7) << name;
    EXPECT_LT(rel_error(got[2], test::numeric_grad(loss, pb)), 1e-7) << name;
  }
}

TEST(BiasGeluTest, LowPrecisionAndFloatBiasMatchTheReference) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    for (at::ScalarType bias_dtype : {dtype, at::kFloat}) {
      const at::Tensor x = (at::randn({9, 64}) * 2).to(dtype);
      const at::Tensor bias = at::randn({64}).to(bias_dtype), dy = at::randn({9, 64}).to(dtype);
      const auto got = run(kFunction, x, bias, dy);
      EXPECT_EQ(got[0].scalar_type(), dtype);
      EXPECT_EQ(got[2].scalar_type(), bias_dtype);
      expect_close(got, run(kReference, x, bias, dy), 1e-2);
    }
  }
}

TEST(BiasGeluTest, BadArgumentsNameWhatIsWrong) {
  const at::Tensor x = at::randn({4, 6}), bias = at::randn({6});
  auto message = [](const at::Tensor& a, const at::Tensor& b) {
    return test::data_error_message([&] { bias_gelu(a, b); });
  };
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(message(x.view({24}), bias),
                  "x must be (N, D) float32, float64, bfloat16 or float16, got Float [24]"));
  EXPECT_TRUE(has(message(x.to(at::kLong), bias), "got Long [4, 6]"));
  EXPECT_TRUE(has(message(x, at::randn({5})),
                  "bias must be (6,) Float or Float on cpu for x Float [4, 6], got Float [5] on "
                  "cpu"));
  EXPECT_TRUE(
      has(message(x.to(at::kBFloat16), bias.to(at::kHalf)),
          "bias must be (6,) BFloat16 or Float on cpu for x BFloat16 [4, 6], got Half [6]"));
  EXPECT_TRUE(has(message(x, bias.view({2, 3})), "got Float [2, 3] on cpu"));
}

// ---- CUDA: the kernels against the reference on the GPU ----------------------------------

TEST(BiasGeluCudaTest, KernelsMatchTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::bias_gelu_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 3072},  {7, 3072},    {16384, 3072},
                                                           {33, 4000}, {1001, 1001}, {3, 5}};
  for (const auto& [rows, width] : shapes) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (at::ScalarType bias_dtype : {dtype, at::kFloat}) {
        for (bool misaligned : {false, true}) {
          if (misaligned && bias_dtype != dtype) continue;
          SCOPED_TRACE(::testing::Message()
                       << "N " << rows << " D " << width << " " << dtype << " bias " << bias_dtype
                       << (misaligned ? " misaligned" : ""));
          at::Tensor x = (at::randn({rows, width}, cuda) * 2).to(dtype);
          if (misaligned) {  // rows one element off 16 bytes: the scalar path
            at::Tensor buf = at::empty({rows * width + 1}, x.options());
            x = buf.narrow(0, 1, rows * width).view({rows, width}).copy_(x);
          }
          const at::Tensor bias = at::randn({width}, cuda).to(bias_dtype);
          const at::Tensor dy = at::randn({rows, width}, cuda).to(dtype);
          test::poison({{{rows, width}, dtype}, {{width}, bias_dtype}}, cuda.device());
          const auto got = run(kFunction, x, bias, dy);
          const auto want = run(kReference, x, bias, dy);
          expect_close(got, want, dtype == at::kFloat ? 1e-5 : 1e-2);
        }
      }
    }
  }
}

TEST(BiasGeluCudaTest, DbiasIsRunToRunIdentical) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::bias_gelu_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor x = at::randn({16384, 3072}, cuda).to(at::kBFloat16);
  const at::Tensor bias = at::randn({3072}, cuda),
                   dy = at::randn({16384, 3072}, cuda).to(at::kBFloat16);
  const Op op = [](const at::Tensor& a, const at::Tensor& b) { return bias_gelu(a, b); };
  const auto first = run(op, x, bias, dy), second = run(op, x, bias, dy);
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_TRUE(at::equal(first[i], second[i])) << kNames[i];
}

}  // namespace
}  // namespace brrr
