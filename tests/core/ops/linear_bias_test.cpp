// linear_bias and column_sum: the Function's CPU path against at::linear (values, gradients,
// finite differences in float64), errors; on CUDA column_sum against a float64 sum on fresh
// random inputs with poisoned outputs (odd shapes, misaligned rows, every dtype), and the op
// under bf16 autocast against at::linear under autocast.
#include "core/ops/linear_bias.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>
#include <vector>

#include "core/device_info.h"
#include "tests/core/ops/ops_test_util.h"

namespace brrr {
namespace {

using test::rel_error;

// A column sum in `dtype` against float64: the result's rounding to the dtype.
double column_sum_tolerance(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? 1e-2
         : dtype == at::kHalf   ? 2e-3
         : dtype == at::kFloat  ? 1e-5
                                : 1e-12;
}

struct Grads {
  at::Tensor y, dx, dw, db;
};

// y = f(x, w, b) and the gradients of sum(y * dy).
template <typename F>
Grads run(F&& f, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
          const at::Tensor& dy) {
  const at::Tensor lx = x.detach().clone().requires_grad_(true);
  const at::Tensor lw = w.detach().clone().requires_grad_(true);
  const at::Tensor lb = b.detach().clone().requires_grad_(true);
  const at::Tensor y = f(lx, lw, lb);
  (y.to(at::kDouble) * dy.to(at::kDouble)).sum().backward();
  return {y.detach(), lx.grad(), lw.grad(), lb.grad()};
}

void expect_close(const Grads& got, const Grads& want, double tol, double bias_tol) {
  EXPECT_LT(rel_error(got.y, want.y), tol) << "y";
  EXPECT_LT(rel_error(got.dx, want.dx), tol) << "d x";
  EXPECT_LT(rel_error(got.dw, want.dw), tol) << "d weight";
  EXPECT_LT(rel_error(got.db, want.db), bias_tol) << "d bias";
}

TEST(LinearBiasTest, FunctionEqualsAtLinearOnCpu) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (const std::vector<int64_t>& xs : {std::vector<int64_t>{3, 5, 16}, {7, 16}, {16}}) {
    SCOPED_TRACE("x dims " + std::to_string(xs.size()));
    const at::Tensor x = at::randn(xs), w = at::randn({24, 16}), b = at::randn({24});
    std::vector<int64_t> ys = xs;
    ys.back() = 24;
    const at::Tensor dy = at::randn(ys);
    const Grads want =
        run([](auto& x_, auto& w_, auto& b_) { return at::linear(x_, w_, b_); }, x, w, b, dy);
    const Grads got =
        run([](auto& x_, auto& w_, auto& b_) { return detail::linear_bias_function(x_, w_, b_); },
            x, w, b, dy);
    expect_close(got, want, 1e-6, 1e-6);
    EXPECT_EQ(got.y.sizes(), want.y.sizes());
  }
}

TEST(LinearBiasTest, GradientsMatchFiniteDifferences) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  at::Tensor x = at::randn({2, 3, 5}, at::kDouble), w = at::randn({4, 5}, at::kDouble);
  at::Tensor b = at::randn({4}, at::kDouble);
  const at::Tensor dy = at::randn({2, 3, 4}, at::kDouble);
  const Grads got =
      run([](auto& x_, auto& w_, auto& b_) { return detail::linear_bias_function(x_, w_, b_); }, x,
          w, b, dy);
  auto loss = [&] { return (detail::linear_bias_function(x, w, b) * dy).sum(); };
  EXPECT_LT(rel_error(got.dx, test::numeric_grad(loss, x)), 1e-7) << "d x";
  EXPECT_LT(rel_error(got.dw, test::numeric_grad(loss, w)), 1e-7) << "d weight";
  EXPECT_LT(rel_error(got.db, test::numeric_grad(loss, b)), 1e-7) << "d bias";
}

TEST(LinearBiasTest, OnlyTheGradientsAskedForAreComputed) {
  const at::Tensor x = at::randn({4, 6}), w = at::randn({3, 6}).requires_grad_(true);
  const at::Tensor b = at::randn({3});  // no gradient wanted for x and b
  (detail::linear_bias_function(x, w, b)).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(at::allclose(w.grad(), at::ones({4, 3}).t().mm(x)));
  EXPECT_FALSE(b.grad().defined());
}

TEST(LinearBiasTest, ColumnSumOnCpuIsAtSum) {
  const at::Tensor t = at::randn({37, 11});
  EXPECT_TRUE(at::equal(column_sum(t), at::sum(t, 0)));
}

TEST(LinearBiasTest, BadArgumentsNameWhatIsWrong) {
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos;
  };
  const std::string shapes = test::data_error_message([] {
    detail::linear_bias_function(at::randn({2, 5}), at::randn({3, 4}), at::randn({3}));
  });
  EXPECT_TRUE(has(shapes,
                  "linear_bias: expected x (..., in), weight (out, in), bias (out,) of one "
                  "floating dtype on one device, got x Float [2, 5] on cpu, weight Float [3, 4] "
                  "on cpu, bias Float [3] on cpu"))
      << shapes;
  const std::string dtypes = test::data_error_message([] {
    detail::linear_bias_function(at::randn({2, 4}), at::randn({3, 4}).to(at::kBFloat16),
                                 at::randn({3}));
  });
  EXPECT_TRUE(has(dtypes, "weight BFloat16 [3, 4]")) << dtypes;
  EXPECT_TRUE(has(test::data_error_message([] { column_sum(at::ones({4})); }),
                  "column_sum: expected a floating (N, C) tensor, got Float [4]"));
  EXPECT_TRUE(has(test::data_error_message([] {
                    column_sum(at::ones({4, 2}, at::kInt));
                  }),
                  "got Int [4, 2]"));
}

// ---- CUDA ------------------------------------------------------------------------------------

TEST(LinearBiasCudaTest, ColumnSumMatchesAFloat64Sum) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::linear_bias_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Device cuda(at::kCUDA);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {16384, 768}, {16384, 2304}, {4097, 768}, {7, 768}, {33, 1000}, {1, 8}, {5, 3}, {100000, 40}};
  for (const auto& [rows, cols] : shapes) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
      for (bool misaligned : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << rows << " x " << cols << " " << dtype << (misaligned ? " misaligned" : ""));
        at::Tensor t = at::randn({rows, cols}, at::TensorOptions().device(cuda)).add_(0.5);
        t = t.to(dtype);
        if (misaligned) {  // one element off 16 bytes: the scalar path
          at::Tensor buf = at::empty({rows * cols + 1}, t.options());
          t = buf.narrow(0, 1, rows * cols).view({rows, cols}).copy_(t);
        }
        const at::Tensor want = t.to(at::kDouble).sum(0);
        test::poison({{{cols}, dtype}}, cuda);
        const at::Tensor got = column_sum(t);
        ASSERT_EQ(got.scalar_type(), dtype);
        const double tol = column_sum_tolerance(dtype);
        EXPECT_LT(rel_error(got.to(at::kDouble), want), tol);
      }
    }
  }
  // Run to run identical (fixed order, no atomics).
  const at::Tensor t = at::randn({16384, 768}, at::TensorOptions().device(cuda)).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(column_sum(t), column_sum(t)));
}

// On Hopper the bias gradient of GPT's 768-wide layers takes one launch (clusters of 8 blocks);
// the two-launch path (partials, then their sum) is what other devices and shapes take. Both
// against a float64 sum, at 24 slabs of 64 bytes (768 bf16/fp16 columns, 384 float, 192 double:
// one launch on an H200), with rows that leave some of a cluster's warps and unrolled loads
// without a row.
TEST(LinearBiasCudaTest, OneLaunchAndTwoLaunchesBothMatchAFloat64Sum) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Device cuda(at::kCUDA);
  const bool hopper = detail::cuda_compute_capability_major(0) >= 9;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    const int64_t cols = 24 * 64 / static_cast<int64_t>(c10::elementSize(dtype));
    for (const int64_t rows : {16384, 4097, 3, 100003}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols << " " << dtype);
      const at::Tensor t =
          at::randn({rows, cols}, at::TensorOptions().device(cuda)).add_(0.5).to(dtype);
      if (hopper) {
        EXPECT_TRUE(detail::column_sum_takes_one_launch(t));
      }
      const at::Tensor want = t.to(at::kDouble).sum(0);
      const double tol = column_sum_tolerance(dtype);
      for (bool one_launch : {true, false}) {
        SCOPED_TRACE(one_launch ? "one launch" : "two launches");
        test::poison({{{cols}, dtype}}, cuda);
        const at::Tensor got = detail::column_sum_cuda(t, one_launch);
        ASSERT_EQ(got.scalar_type(), dtype);
        ASSERT_TRUE(at::isfinite(got).all().item<bool>());
        EXPECT_LT(rel_error(got.to(at::kDouble), want), tol);
        EXPECT_TRUE(at::equal(got, detail::column_sum_cuda(t, one_launch)));  // run to run
      }
    }
  }
  // Too few slabs to fill the SMs, too many to run at once, misaligned rows: two launches.
  const auto bf16 = at::TensorOptions().device(cuda).dtype(at::kBFloat16);
  EXPECT_FALSE(detail::column_sum_takes_one_launch(at::ones({16384, 40}, bf16)));
  EXPECT_FALSE(detail::column_sum_takes_one_launch(at::ones({16384, 50304}, bf16)));
  EXPECT_FALSE(detail::column_sum_takes_one_launch(
      at::ones({16384 * 768 + 1}, bf16).narrow(0, 1, 768 * 16384).view({16384, 768})));
}

TEST(LinearBiasCudaTest, UnderBf16AutocastMatchesAtLinear) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto f = at::TensorOptions().device(at::kCUDA);
  // float32 parameters and a bf16 input, as in a GPT block under autocast.
  const at::Tensor x = at::randn({4, 1000, 768}, f).to(at::kBFloat16);
  const at::Tensor w = at::randn({2304, 768}, f) * 0.02, b = at::randn({2304}, f);
  const at::Tensor dy = at::randn({4, 1000, 2304}, f).to(at::kBFloat16);
  auto autocast = [&](auto op) {
    return run(
        [&](auto& x_, auto& w_, auto& b_) {
          at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
          at::autocast::set_autocast_enabled(at::kCUDA, true);
          at::Tensor y = op(x_, w_, b_);
          at::autocast::set_autocast_enabled(at::kCUDA, false);
          at::autocast::clear_cache();
          return y;
        },
        x, w, b, dy);
  };
  const Grads want = autocast([](auto& x_, auto& w_, auto& b_) { return at::linear(x_, w_, b_); });
  const Grads got = autocast([](auto& x_, auto& w_, auto& b_) { return linear_bias(x_, w_, b_); });
  EXPECT_EQ(got.y.scalar_type(), at::kBFloat16);
  EXPECT_EQ(got.dw.scalar_type(), at::kFloat) << "the float32 weight's gradient";
  EXPECT_EQ(got.dx.scalar_type(), at::kBFloat16);
  // The same GEMMs; only d bias is summed in another order (then rounded to bf16).
  expect_close(got, want, 1e-5, 1e-2);
}

}  // namespace
}  // namespace brrr
