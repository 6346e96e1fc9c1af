// batch_norm_act: the reference against the formula in float64 (output, running statistics,
// gradients by finite differences), the errors, and on CUDA cuDNN's fused path against the
// reference on fresh random inputs with poisoned outputs, with and without the residual, bf16
// and fp16, ResNet's shapes and odd ones.
#include "core/ops/batch_norm_act.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "tests/core/ops/ops_test_util.h"

namespace brrr {
namespace {

// The formula in float64: y = relu((x - mean) / sqrt(var + eps) * w + b + r), batch statistics
// over (N, H, W), the biased variance; the running variance takes the unbiased one.
struct Expected {
  at::Tensor y, running_mean, running_var;
};
Expected formula(const at::Tensor& x, const at::Tensor& r, const at::Tensor& w,
                 const at::Tensor& b, const at::Tensor& rm, const at::Tensor& rv, double momentum,
                 double eps, bool relu) {
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor mean = xd.mean({0, 2, 3});
  const at::Tensor var = xd.var({0, 2, 3}, /*unbiased=*/false);
  const double n = static_cast<double>(x.numel() / x.size(1));
  auto c = [](const at::Tensor& t) { return t.to(at::kDouble).view({1, -1, 1, 1}); };
  at::Tensor y = (xd - c(mean)) / at::sqrt(c(var) + eps) * c(w) + c(b);
  if (r.defined()) y = y + r.to(at::kDouble);
  if (relu) y = at::relu(y);
  return {y, rm.to(at::kDouble) * (1 - momentum) + mean * momentum,
          rv.to(at::kDouble) * (1 - momentum) + var * (n / (n - 1)) * momentum};
}

TEST(BatchNormActTest, ReferenceMatchesTheFormulaInTrainingAndEvaluation) {
  at::manual_seed(3);
  for (bool with_residual : {false, true}) {
    for (bool relu : {false, true}) {
      const at::Tensor x = at::randn({4, 5, 3, 7}) * 2 + 0.5;
      const at::Tensor r = with_residual ? at::randn({4, 5, 3, 7}) : at::Tensor();
      const at::Tensor w = at::rand({5}) + 0.5, b = at::randn({5});
      at::Tensor rm = at::randn({5}), rv = at::rand({5}) + 0.5;
      const Expected want = formula(x, r, w, b, rm, rv, 0.1, 1e-5, relu);
      const at::Tensor y = batch_norm_act(x, r, w, b, rm, rv, true, 0.1, 1e-5, relu);
      EXPECT_LT(test::rel_error(y, want.y), 1e-6) << with_residual << relu;
      EXPECT_LT(test::rel_error(rm, want.running_mean), 1e-6);
      EXPECT_LT(test::rel_error(rv, want.running_var), 1e-6);
      if (relu) {
        EXPECT_EQ(y.min().item<float>(), 0.0f);
      }
      // Evaluation: the running statistics normalise, and stay as they are.
      const at::Tensor rm0 = rm.clone(), rv0 = rv.clone();
      const at::Tensor ye = batch_norm_act(x, r, w, b, rm, rv, false, 0.1, 1e-5, relu);
      at::Tensor we = (x.to(at::kDouble) - rm0.to(at::kDouble).view({1, -1, 1, 1})) /
                          at::sqrt(rv0.to(at::kDouble).view({1, -1, 1, 1}) + 1e-5) *
                          w.to(at::kDouble).view({1, -1, 1, 1}) +
                      b.to(at::kDouble).view({1, -1, 1, 1});
      if (with_residual) we = we + r.to(at::kDouble);
      if (relu) we = at::relu(we);
      EXPECT_LT(test::rel_error(ye, we), 1e-6);
      EXPECT_TRUE(at::equal(rm, rm0));
      EXPECT_TRUE(at::equal(rv, rv0));
    }
  }
  // Without running buffers, training still normalises by the batch.
  const at::Tensor x = at::randn({3, 2, 4, 4});
  const at::Tensor w = at::ones({2}), b = at::zeros({2});
  EXPECT_LT(test::rel_error(batch_norm_act(x, {}, w, b, {}, {}, true, 0.1, 1e-5, false),
                            formula(x, {}, w, b, at::zeros({2}), at::ones({2}), 0.1, 1e-5, false).y),
            1e-6);
  EXPECT_STREQ(batch_norm_act_path(x, true), "reference");
}

// The gradients of every input in float64 against central differences of the same op.
TEST(BatchNormActTest, GradientsMatchFiniteDifferences) {
  at::manual_seed(5);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor x = (at::randn({3, 4, 2, 3}, f64) * 1.5).requires_grad_();
  const at::Tensor r = at::randn({3, 4, 2, 3}, f64).requires_grad_();
  const at::Tensor w = (at::rand({4}, f64) + 0.5).requires_grad_();
  const at::Tensor b = at::randn({4}, f64).requires_grad_();
  const at::Tensor dy = at::randn({3, 4, 2, 3}, f64);
  // float64 is the test's precision only: the op's API is float32/bf16/fp16 with float32
  // parameters, so the reference's ATen composition is differentiated at float64 directly.
  auto loss = [&] {
    at::Tensor y = at::batch_norm(x, w, b, {}, {}, true, 0.1, 1e-5, false) + r;
    return (at::relu(y) * dy).sum();
  };
  const std::vector<at::Tensor> inputs = {x, r, w, b};
  const auto grads = torch::autograd::grad({loss()}, inputs);
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& input = inputs[i];
    const at::Tensor numeric = test::numeric_grad(
        [&] {
          at::NoGradGuard no_grad;
          return loss();
        },
        input);
    EXPECT_LT(test::rel_error(grads[i], numeric), 1e-6) << "input " << i;
  }
  // And the op's float32 reference gives the same gradients as its float64 composition.
  const at::Tensor xf = x.detach().to(at::kFloat).requires_grad_();
  const at::Tensor rf = r.detach().to(at::kFloat).requires_grad_();
  const at::Tensor wf = w.detach().to(at::kFloat).requires_grad_();
  const at::Tensor bf = b.detach().to(at::kFloat).requires_grad_();
  const at::Tensor yf = batch_norm_act(xf, rf, wf, bf, {}, {}, true, 0.1, 1e-5, true);
  const auto gf = torch::autograd::grad({(yf * dy.to(at::kFloat)).sum()}, {xf, rf, wf, bf});
  for (size_t i = 0; i < gf.size(); ++i) {
    EXPECT_LT(test::rel_error(gf[i], grads[i]), 1e-5) << "input " << i;
  }
}

TEST(BatchNormActTest, BadArgumentsNameWhatIsWrong) {
  const at::Tensor x = at::randn({2, 3, 4, 4});
  const at::Tensor w = at::ones({3}), b = at::zeros({3});
  const at::Tensor rm = at::zeros({3}), rv = at::ones({3});
  auto msg = [&](auto&& f) { return test::data_error_message(f); };
  EXPECT_NE(msg([&] { batch_norm_act(x.view({2, 3, 16}), {}, w, b, rm, rv, true, 0.1, 1e-5, true); })
                .find("x must be (N, C, H, W) with C > 0, float32, bfloat16 or float16, got Float "
                      "[2, 3, 16]"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              batch_norm_act(x.to(at::kDouble), {}, w, b, rm, rv, true, 0.1, 1e-5, true);
            }).find("got Double [2, 3, 4, 4]"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              batch_norm_act(x, at::randn({2, 3, 4, 5}), w, b, rm, rv, true, 0.1, 1e-5, true);
            }).find("residual must be like x (Float [2, 3, 4, 4] on cpu), got Float [2, 3, 4, 5]"),
            std::string::npos);
  EXPECT_NE(msg([&] { batch_norm_act(x, {}, at::ones({4}), b, rm, rv, true, 0.1, 1e-5, true); })
                .find("weight must be float32 (3,) on cpu for x Float [2, 3, 4, 4] on cpu, got "
                      "Float [4]"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              batch_norm_act(x, {}, w, b.to(at::kHalf), rm, rv, true, 0.1, 1e-5, true);
            }).find("bias must be float32 (3,)"),
            std::string::npos);
  EXPECT_NE(msg([&] { batch_norm_act(x, {}, w, b, rm, {}, true, 0.1, 1e-5, true); })
                .find("running_mean and running_var must be both given or neither"),
            std::string::npos);
  EXPECT_NE(msg([&] { batch_norm_act(x, {}, w, b, {}, {}, false, 0.1, 1e-5, true); })
                .find("evaluation (training = false) needs the running statistics"),
            std::string::npos);
  EXPECT_NE(msg([&] { batch_norm_act(x, {}, w, b, rm, rv, true, 1.5, 1e-5, true); })
                .find("eps must be > 0 and momentum in [0, 1], got eps 1e-05 momentum 1.5"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              batch_norm_act(at::randn({1, 3, 1, 1}), {}, w, b, rm, rv, true, 0.1, 1e-5, true);
            }).find("training needs more than one value per channel"),
            std::string::npos);
}

// cuDNN's fused path against the reference on the GPU: fresh random inputs every run, outputs
// poisoned, forward (y, running statistics) and backward (every gradient).
TEST(BatchNormActCudaTest, CudnnPathMatchesTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::batch_norm_act_cudnn_built());
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 8, 3, 5}, {5, 64, 7, 9}, {8, 256, 14, 14}, {3, 1000, 5, 5}, {32, 64, 56, 56},
      {16, 2048, 7, 7}, {4, 3, 5, 5}};  // C = 3: cuDNN may decline it (then the reference runs)
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& shape : shapes) {
    for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
      for (bool with_residual : {false, true}) {
        SCOPED_TRACE(at::str(shape) + " " + c10::toString(dtype) +
                     (with_residual ? " with residual" : ""));
        const int64_t c = shape[1];
        auto nhwc = [&](const at::Tensor& t) {
          return t.to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
        };
        const at::Tensor x = nhwc(at::randn(shape, cuda) * 2 + 0.5);
        const at::Tensor r = with_residual ? nhwc(at::randn(shape, cuda)) : at::Tensor();
        const at::Tensor w = at::rand({c}, cuda) + 0.5, b = at::randn({c}, cuda);
        const at::Tensor dy = nhwc(at::randn(shape, cuda));
        at::Tensor rm = at::randn({c}, cuda), rv = at::rand({c}, cuda) + 0.5;
        at::Tensor rm_ref = rm.clone(), rv_ref = rv.clone();
        ASSERT_STREQ(batch_norm_act_path(x, true), "cudnn");

        auto run = [&](bool fused, at::Tensor& mean, at::Tensor& var) {
          const at::Tensor xi = x.detach().requires_grad_();
          const at::Tensor ri = with_residual ? r.detach().requires_grad_() : at::Tensor();
          const at::Tensor wi = w.detach().requires_grad_(), bi = b.detach().requires_grad_();
          test::poison({{shape, dtype}, {shape, dtype}, {{c}, at::kFloat}}, x.device());
          const at::Tensor y =
              fused ? batch_norm_act(xi, ri, wi, bi, mean, var, true, 0.1, 1e-5, true)
                    : batch_norm_act_reference(xi.to(at::kFloat), with_residual ? ri.to(at::kFloat) : ri,
                                               wi, bi, mean, var, true, 0.1, 1e-5, true);
          std::vector<at::Tensor> inputs = {xi, wi, bi};
          if (with_residual) inputs.push_back(ri);
          std::vector<at::Tensor> out = torch::autograd::grad({y}, inputs, {dy.to(y.scalar_type())});
          out.insert(out.begin(), y);
          return out;
        };
        const auto got = run(true, rm, rv);
        const auto want = run(false, rm_ref, rv_ref);  // float32 from the same rounded inputs
        EXPECT_EQ(got[0].scalar_type(), dtype);
        EXPECT_TRUE(got[0].is_contiguous(at::MemoryFormat::ChannelsLast));
        const char* names[] = {"y", "dx", "dweight", "dbias", "dresidual"};
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_LT(test::rel_error(got[i], want[i]), 1e-2) << names[i];
        }
        EXPECT_LT(test::rel_error(rm, rm_ref), 1e-4);
        EXPECT_LT(test::rel_error(rv, rv_ref), 1e-4);
      }
    }
  }
}

}  // namespace
}  // namespace brrr
