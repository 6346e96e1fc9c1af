// residual_layernorm: the reference and the autograd Function's CPU stages against the unfused
// ATen composition (add, then layer_norm) and against finite differences, unused outputs,
// errors, each with and without x_bias (the branch linear's bias, added by the op); on CUDA the
// kernels against the reference on fresh random inputs, C = 768 and 1000, odd N, misaligned rows,
// mixed dtypes, and run-to-run identical parameter gradients.
#include "core/ops/residual_layernorm.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <optional>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "tests/core/ops/ops_test_util.h"

namespace brrr {
namespace {

using test::rel_error;
constexpr double kEps = 1e-5;

struct Inputs {
  at::Tensor residual, x, weight, bias, x_bias;  // x_bias may be undefined
};

// x in x_dtype (residual's dtype when left out); x_bias with with_x_bias.
Inputs make_inputs(int64_t rows, int64_t channels, at::ScalarType dtype, at::Device device,
                   std::optional<at::ScalarType> x_dtype = std::nullopt, bool with_x_bias = false) {
  const auto f = at::TensorOptions().device(device).dtype(at::toOpMathType(dtype));
  // An offset mean, so the variance pass is tested against cancellation.
  return {(at::randn({rows, channels}, f) + 3).to(dtype),
          at::randn({rows, channels}, f).to(x_dtype.value_or(dtype)),
          at::randn({channels}, f) * 0.5 + 1, at::randn({channels}, f) * 0.1,
          with_x_bias ? at::randn({channels}, f) : at::Tensor()};
}

at::Tensor leaf_of(const at::Tensor& t) {
  return t.defined() ? t.clone().requires_grad_(true) : t;
}

using Op = std::function<std::tuple<at::Tensor, at::Tensor>(const Inputs&)>;

// Outputs and gradients of `op` for the loss sum(h * dh) + sum(y * dy): {h, y, d residual, d x,
// d weight, d bias, d x_bias (undefined without x_bias)}. With use_h (use_y) false, that output
// does not enter the loss.
std::vector<at::Tensor> run(const Op& op, const Inputs& in, const at::Tensor& dh,
                            const at::Tensor& dy, bool use_h = true, bool use_y = true) {
  Inputs leaf{leaf_of(in.residual), leaf_of(in.x), leaf_of(in.weight), leaf_of(in.bias),
              leaf_of(in.x_bias)};
  const auto [h, y] = op(leaf);
  at::Tensor loss = at::zeros({}, h.options().dtype(at::kDouble));
  if (use_h) loss = loss + (h.to(at::kDouble) * dh.to(at::kDouble)).sum();
  if (use_y) loss = loss + (y.to(at::kDouble) * dy.to(at::kDouble)).sum();
  loss.backward();
  return {h.detach(),
          y.detach(),
          leaf.residual.grad(),
          leaf.x.grad(),
          leaf.weight.grad(),
          leaf.bias.grad(),
          leaf.x_bias.defined() ? leaf.x_bias.grad() : at::Tensor()};
}

Op function_op(at::ScalarType out) {
  return [out](const Inputs& i) {
    return detail::residual_layernorm_function(i.residual, i.x, i.weight, i.bias, kEps, out,
                                               i.x_bias);
  };
}
Op reference_op(at::ScalarType out) {
  return [out](const Inputs& i) {
    return residual_layernorm_reference(i.residual, i.x, i.weight, i.bias, kEps, out, i.x_bias);
  };
}
// The branch's output as its linear gives it (x + x_bias, promoting), added to the stream.
at::Tensor branch(const Inputs& i) {
  return i.x_bias.defined() ? i.x + i.x_bias : i.x;
}
Op unfused_op() {
  return [](const Inputs& i) {
    const at::Tensor h = i.residual + branch(i);
    return std::tuple{h, at::layer_norm(h, {h.size(1)}, i.weight, i.bias, kEps)};
  };
}

const char* const kNames[] = {"new_residual", "y",      "d residual", "d x",
                              "d weight",     "d bias", "d x_bias"};

void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                  double tol) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << kNames[i];
    if (got[i].defined()) {
      EXPECT_LT(rel_error(got[i], want[i]), tol) << kNames[i];
    }
  }
}

TEST(ResidualLayerNormTest, CpuPathsEqualTheUnfusedComposition) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (int64_t channels : {768, 1000, 7}) {
    for (bool with_x_bias : {false, true}) {
      SCOPED_TRACE("C " + std::to_string(channels) + (with_x_bias ? " x_bias" : ""));
      const Inputs in = make_inputs(9, channels, at::kFloat, at::kCPU, std::nullopt, with_x_bias);
      const at::Tensor dh = at::randn({9, channels}), dy = at::randn({9, channels});
      const auto want = run(unfused_op(), in, dh, dy);
      expect_close(run(reference_op(at::kFloat), in, dh, dy), want, 1e-6);
      expect_close(run(function_op(at::kFloat), in, dh, dy), want, 1e-6);
    }
  }
}

TEST(ResidualLayerNormTest, GradientsMatchFiniteDifferences) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (int64_t channels : {5, 8}) {
    const Inputs in = make_inputs(3, channels, at::kDouble, at::kCPU, std::nullopt, true);
    const at::Tensor dh = at::randn({3, channels}, at::kDouble);
    const at::Tensor dy = at::randn({3, channels}, at::kDouble);
    for (const auto& [name, op] : {std::pair{"function", function_op(at::kDouble)},
                                   std::pair{"reference", reference_op(at::kDouble)}}) {
      SCOPED_TRACE(std::string(name) + " C " + std::to_string(channels));
      const auto got = run(op, in, dh, dy);
      Inputs probe{in.residual.clone(), in.x.clone(), in.weight.clone(), in.bias.clone(),
                   in.x_bias.clone()};
      auto loss = [&] {
        const auto [h, y] = op(probe);
        return (h * dh).sum() + (y * dy).sum();
      };
      const at::Tensor* inputs[] = {&probe.residual, &probe.x, &probe.weight, &probe.bias,
                                    &probe.x_bias};
      for (int i = 0; i < 5; ++i) {
        EXPECT_LT(rel_error(got[2 + i], test::numeric_grad(loss, *inputs[i])), 1e-7)
            << kNames[2 + i];
      }
    }
  }
}

TEST(ResidualLayerNormTest, UnusedOutputsCountAsZero) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const Inputs in = make_inputs(4, 16, at::kFloat, at::kCPU, std::nullopt, true);
  const at::Tensor dh = at::randn({4, 16}), dy = at::randn({4, 16});
  for (auto [use_h, use_y] : {std::pair{true, false}, std::pair{false, true}}) {
    const auto got = run(function_op(at::kFloat), in, dh, dy, use_h, use_y);
    const auto want = run(reference_op(at::kFloat), in, dh, dy, use_h, use_y);
    for (size_t i = 2; i < got.size(); ++i) {
      if (!want[i].defined() || !got[i].defined()) {  // y unused: no weight/bias gradient
        EXPECT_FALSE(use_y) << kNames[i];
        continue;
      }
      EXPECT_LT(rel_error(got[i], want[i]), 1e-6) << kNames[i] << " use_h " << use_h;
    }
  }
}

TEST(ResidualLayerNormTest, MixedDtypesMatchTheReference) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (auto [dtype, out] :
       {std::pair{at::kBFloat16, at::kBFloat16}, std::pair{at::kBFloat16, at::kFloat},
        std::pair{at::kFloat, at::kHalf}}) {
    const Inputs in = make_inputs(6, 40, dtype, at::kCPU, std::nullopt, out == at::kBFloat16);
    const at::Tensor dh = at::randn({6, 40}).to(dtype), dy = at::randn({6, 40}).to(out);
    const auto got = run(function_op(out), in, dh, dy);
    EXPECT_EQ(got[0].scalar_type(), dtype);
    EXPECT_EQ(got[1].scalar_type(), out);
    expect_close(got, run(reference_op(out), in, dh, dy), 1e-2);
  }
}

// A float32 stream with the branch in bf16/fp16 (what autocast's matmuls return): the same as
// adding in float and normalising, and d x is d residual rounded to x's dtype, as autograd's
// cast gives the unfused composition.
TEST(ResidualLayerNormTest, NarrowBranchUnderAFloatStreamEqualsTheUnfusedComposition) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (at::ScalarType x_dtype : {at::kBFloat16, at::kHalf}) {
    for (at::ScalarType out : {at::kBFloat16, at::kFloat}) {
      const bool with_x_bias = out == at::kBFloat16;  // GPT's: the c_proj bias added by the op
      SCOPED_TRACE(::testing::Message()
                   << "x " << x_dtype << " out " << out << " x_bias " << with_x_bias);
      const Inputs in = make_inputs(9, 768, at::kFloat, at::kCPU, x_dtype, with_x_bias);
      const at::Tensor dh = at::randn({9, 768}), dy = at::randn({9, 768}).to(out);
      const Op unfused = [out](const Inputs& i) {
        const at::Tensor h = i.residual + branch(i);  // promotes to float32
        return std::tuple{h, at::layer_norm(h, {h.size(1)}, i.weight, i.bias, kEps).to(out)};
      };
      const auto want = run(unfused, in, dh, dy);
      for (const auto& [name, op] :
           {std::pair{"function", function_op(out)}, std::pair{"reference", reference_op(out)}}) {
        SCOPED_TRACE(name);
        const auto got = run(op, in, dh, dy);
        EXPECT_EQ(got[0].scalar_type(), at::kFloat);
        EXPECT_EQ(got[3].scalar_type(), x_dtype) << "d x";
        EXPECT_EQ(got[2].scalar_type(), at::kFloat) << "d residual";
        // float32 results to 1e-6; y and d x to their own dtype's rounding (a last-bit difference
        // in float may round one element the other way).
        ASSERT_EQ(got[6].defined(), with_x_bias);
        for (size_t i = 0; i < got.size(); ++i) {
          if (!got[i].defined()) continue;
          const at::ScalarType t = got[i].scalar_type();
          const double tol = t == at::kBFloat16 ? 1e-2 : t == at::kHalf ? 2e-3 : 1e-6;
          EXPECT_LT(rel_error(got[i], want[i]), tol) << kNames[i];
        }
        EXPECT_TRUE(at::equal(got[3], got[2].to(x_dtype))) << "d x is d residual rounded";
      }
    }
  }
}

TEST(ResidualLayerNormTest, BadArgumentsNameWhatIsWrong) {
  const Inputs in = make_inputs(4, 6, at::kFloat, at::kCPU);
  auto message = [&](const at::Tensor& r, const at::Tensor& x, const at::Tensor& w,
                     at::ScalarType out = at::kFloat) {
    return test::data_error_message([&] { residual_layernorm(r, x, w, in.bias, kEps, out); });
  };
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(message(in.residual.view({24}), in.x.view({24}), in.weight),
                  "residual must be (N, C) with C > 0, float32, float64, bfloat16 or float16, "
                  "got Float [24]"));
  EXPECT_TRUE(has(message(in.residual.to(at::kInt), in.x, in.weight), "got Int [4, 6]"));
  EXPECT_TRUE(has(message(in.residual, in.x.view({6, 4}), in.weight),
                  "x must be [4, 6] on cpu in residual's dtype Float (or bfloat16/float16), "
                  "got Float [6, 4] on cpu"));
  EXPECT_TRUE(
      has(message(in.residual, in.x.to(at::kDouble), in.weight), "got Double [4, 6] on cpu"));
  EXPECT_TRUE(has(message(in.residual.to(at::kBFloat16), in.x, in.weight.to(at::kFloat)),
                  "x must be [4, 6] on cpu in residual's dtype BFloat16, got Float [4, 6]"));
  EXPECT_TRUE(has(message(in.residual, in.x, at::ones({5})),
                  "weight and bias must be Float (6,) on cpu for residual Float [4, 6], got "
                  "Float [5] on cpu"));
  EXPECT_TRUE(has(
      message(in.residual.to(at::kBFloat16), in.x.to(at::kBFloat16), in.weight.to(at::kBFloat16)),
      "weight and bias must be Float (6,) on cpu for residual BFloat16 [4, 6], got "
      "BFloat16 [6] on cpu"));
  EXPECT_TRUE(has(message(in.residual, in.x, in.weight, at::kInt),
                  "out_dtype must be float32, float64, bfloat16 or float16, got Int"));
  for (const at::Tensor& x_bias : {at::ones({6}, at::kBFloat16), at::ones({4, 6})}) {
    EXPECT_TRUE(
        has(test::data_error_message([&] {
              residual_layernorm(in.residual, in.x, in.weight, in.bias, kEps, at::kFloat, x_bias);
            }),
            "x_bias must be Float (6,) on cpu for residual Float [4, 6], got " +
                std::string(x_bias.dim() == 1 ? "BFloat16 [6]" : "Float [4, 6]") + " on cpu"));
  }
}

// ---- CUDA: the kernels against the reference on the GPU ----------------------------------

TEST(ResidualLayerNormCudaTest, KernelsMatchTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::residual_layernorm_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Device cuda(at::kCUDA);
  // C = 1024 (float) and 2048 (bf16/fp16): rows of exactly 8 16-byte chunks a lane, the widest the
  // kernels keep in registers; 2048 (float) and 4000: wider, read from the cache.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 768},     {7, 768}, {4097, 768}, {16384, 768}, {33, 1000},
      {3001, 1000}, {5, 8},   {3, 1024},   {2, 2048},    {2, 4000}};
  struct Dtypes {
    at::ScalarType residual, x, out;
  };
  const std::vector<Dtypes> dtypes = {
      {at::kFloat, at::kFloat, at::kFloat},       {at::kBFloat16, at::kBFloat16, at::kBFloat16},
      {at::kBFloat16, at::kBFloat16, at::kFloat}, {at::kFloat, at::kFloat, at::kBFloat16},
      {at::kFloat, at::kBFloat16, at::kBFloat16},  // GPT's
      {at::kFloat, at::kHalf, at::kFloat},        {at::kHalf, at::kHalf, at::kHalf}};
  for (const auto& [rows, channels] : shapes) {
    for (const auto& [dtype, x_dtype, out] : dtypes) {
      for (const auto& [misaligned, with_x_bias] :
           {std::pair{false, false}, std::pair{true, false}, std::pair{false, true},
            std::pair{true, true}}) {
        SCOPED_TRACE(::testing::Message()
                     << "N " << rows << " C " << channels << " " << dtype << " + " << x_dtype
                     << " -> " << out << (misaligned ? " misaligned" : "")
                     << (with_x_bias ? " x_bias" : ""));
        Inputs in = make_inputs(rows, channels, dtype, cuda, x_dtype, with_x_bias);
        if (misaligned) {  // rows one element off 16 bytes: the scalar path at any C
          at::Tensor buf = at::empty({rows * channels + 1}, in.x.options());
          in.x = buf.narrow(0, 1, rows * channels).view({rows, channels}).copy_(in.x);
        }
        const at::Tensor dh = at::randn({rows, channels}, in.weight.options()).to(dtype);
        const at::Tensor dy = at::randn({rows, channels}, in.weight.options()).to(out);
        test::poison({{{rows, channels}, dtype},
                      {{rows, channels}, x_dtype},
                      {{rows, channels}, out},
                      {{rows}, at::kFloat},
                      {{channels}, at::kFloat}},
                     cuda);
        const auto got = run(function_op(out), in, dh, dy);
        const auto want = run(reference_op(out), in, dh, dy);
        ASSERT_EQ(got[3].scalar_type(), x_dtype);
        const bool low = dtype != at::kFloat || x_dtype != at::kFloat || out != at::kFloat;
        expect_close(got, want, low ? 1e-2 : 1e-5);
      }
    }
  }
}

TEST(ResidualLayerNormCudaTest, ParameterGradientsAreRunToRunIdentical) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::residual_layernorm_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  // GPT's: a float32 stream, the branch in bf16 with its linear's bias added here.
  const Inputs in =
      make_inputs(16384, 768, at::kFloat, at::Device(at::kCUDA), at::kBFloat16, /*x_bias=*/true);
  const at::Tensor dh = at::randn({16384, 768}, in.weight.options());
  const at::Tensor dy = at::randn({16384, 768}, in.weight.options()).to(at::kBFloat16);
  const Op op = [](const Inputs& i) {  // the public op: the kernels on CUDA
    return residual_layernorm(i.residual, i.x, i.weight, i.bias, kEps, at::kBFloat16, i.x_bias);
  };
  const auto first = run(op, in, dh, dy);
  const auto second = run(op, in, dh, dy);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(at::equal(first[i], second[i])) << kNames[i];
  }
}

// The forward's two ways of walking a row, the registers (rows up to 8 16-byte chunks a lane) and
// the cache (any row), add and reduce in the same order: the same bits.
TEST(ResidualLayerNormCudaTest, RegisterAndCachePathsGiveTheSameBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::residual_layernorm_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (const auto& [rows, channels, dtype, x_dtype] :
       std::vector<std::tuple<int64_t, int64_t, at::ScalarType, at::ScalarType>>{
           {4097, 768, at::kFloat, at::kBFloat16},  // GPT's
           {33, 1024, at::kFloat, at::kFloat},
           {65, 2048, at::kBFloat16, at::kBFloat16},
           {9, 40, at::kHalf, at::kHalf}}) {
    SCOPED_TRACE(::testing::Message() << "N " << rows << " C " << channels << " " << dtype);
    const bool with_x_bias = rows != 33;  // GPT's (4097 rows) with its c_proj bias
    const Inputs in =
        make_inputs(rows, channels, dtype, at::Device(at::kCUDA), x_dtype, with_x_bias);
    test::poison({{{rows, channels}, dtype}, {{rows, channels}, at::kBFloat16}},
                 in.weight.device());
    const auto regs = detail::residual_layernorm_forward_cuda(in.residual, in.x, in.weight, in.bias,
                                                              kEps, at::kBFloat16, in.x_bias, true);
    test::poison({{{rows, channels}, dtype}, {{rows, channels}, at::kBFloat16}},
                 in.weight.device());
    const auto cache = detail::residual_layernorm_forward_cuda(
        in.residual, in.x, in.weight, in.bias, kEps, at::kBFloat16, in.x_bias, false);
    for (size_t i = 0; i < regs.size(); ++i) EXPECT_TRUE(at::equal(regs[i], cache[i])) << i;
  }
}

// The backward's two ways of summing x_bias's gradient, in registers (a float32 stream with a
// 16-bit y, rows up to 1024 columns) and in a third shared-memory slice (any row), agree to float
// rounding on every output (KernelsMatchTheReference checks the op's own path against the
// reference). Not to the bit: the two kernels run at different occupancy, so a large N gives them
// different grids (rows land in other blocks, partial sums add in another order), and ptxas may
// contract a multiply and an add into an FMA in one instantiation and not in the other (seen on the
// H200: d residual differed). The other cases take the slice both times.
TEST(ResidualLayerNormCudaTest, XBiasSumsInRegistersAndSharedMemoryAgree) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::residual_layernorm_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (const auto& [rows, channels, dtype, x_dtype] :
       std::vector<std::tuple<int64_t, int64_t, at::ScalarType, at::ScalarType>>{
           {4097, 768, at::kFloat, at::kBFloat16},  // GPT's
           {33, 1024, at::kFloat, at::kFloat},      // 8 chunks a lane, the widest in registers
           {65, 1000, at::kFloat, at::kHalf},
           {65, 1000, at::kBFloat16, at::kBFloat16},
           {9, 40, at::kHalf, at::kHalf},
           {3, 2048, at::kFloat, at::kBFloat16}}) {  // too wide: both take the slice
    SCOPED_TRACE(::testing::Message() << "N " << rows << " C " << channels << " " << dtype);
    const Inputs in = make_inputs(rows, channels, dtype, at::Device(at::kCUDA), x_dtype, true);
    const auto fwd = detail::residual_layernorm_forward_cuda(in.residual, in.x, in.weight, in.bias,
                                                             kEps, at::kBFloat16, in.x_bias);
    const at::Tensor dnew = at::randn({rows, channels}, in.weight.options()).to(dtype);
    const at::Tensor dy = at::randn({rows, channels}, in.weight.options()).to(at::kBFloat16);
    std::vector<std::vector<at::Tensor>> got;
    for (const bool registers : {true, false}) {
      test::poison(
          {{{rows, channels}, dtype}, {{rows, channels}, x_dtype}, {{channels}, at::kFloat}},
          in.weight.device());
      got.push_back(detail::residual_layernorm_backward_cuda(
          dy, dnew, fwd[0], in.weight, fwd[2], fwd[3], x_dtype, /*x_bias_grad=*/true, registers));
    }
    const char* const names[] = {"d residual", "d weight", "d bias", "d x", "d x_bias"};
    for (size_t i = 0; i < got[0].size(); ++i) {
      const at::Tensor& regs = got[0][i];
      ASSERT_TRUE(regs.defined()) << names[i];
      EXPECT_TRUE(regs.isfinite().all().item<bool>()) << names[i] << ": poison left";
      // float32: rounding only (a sum that missed a chunk or a row is off by far more); a 16-bit
      // d x may round the other way where d residual moved by an ulp.
      EXPECT_LT(rel_error(regs, got[1][i]), regs.scalar_type() == at::kFloat ? 1e-5 : 1e-2)
          << names[i];
    }
  }
}

}  // namespace
}  // namespace brrr
