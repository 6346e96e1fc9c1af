#include "tests/core/ops/ops_test_util.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <limits>
#include <random>
#include <string>

namespace brrr::test {
namespace {

// ATen's CPU logsumexp is, on its first call in a process, now and then about 5e-11 off in
// double (seen in about 1 process in 100, torch 2.13.0 with MKL on AVX-512; every later call is
// within 1e-16 of a long-double sum). A test comparing two computations at 1e-12 would then fail
// on which of them ran first, so each test binary runs that math once before its first test.
class WarmCpuMath : public ::testing::Environment {
 public:
  void SetUp() override {
    for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
      const at::Tensor x = at::rand({64, 257}, at::TensorOptions().dtype(dtype));
      x.logsumexp(1);
      x.log_softmax(1);
      x.exp();
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kWarmCpuMath =
    ::testing::AddGlobalTestEnvironment(new WarmCpuMath);

}  // namespace

uint64_t fresh_seed() {
  // BRRR_TEST_SEED replays a failure's seed.
  const char* replay = std::getenv("BRRR_TEST_SEED");
  const uint64_t seed = replay != nullptr ? std::stoull(replay) : std::random_device{}();
  at::manual_seed(seed);  // CPU and, where present, every CUDA device
  return seed;
}

void poison(const std::vector<std::pair<std::vector<int64_t>, at::ScalarType>>& blocks,
            at::Device device) {
  std::vector<at::Tensor> held;
  for (const auto& [sizes, dtype] : blocks) {
    held.push_back(at::empty(sizes, at::TensorOptions().dtype(dtype).device(device)));
    held.back().fill_(std::numeric_limits<double>::quiet_NaN());
  }
}  // freed here, back to the allocator's cache

double rel_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.detach().to(at::kCPU, at::kDouble);
  const at::Tensor w = want.detach().to(at::kCPU, at::kDouble);
  if (g.sizes() != w.sizes()) return std::numeric_limits<double>::infinity();
  // A non-finite entry on either side passes only where the other holds the same (NaN: NaN).
  const at::Tensor same = g.eq(w).logical_or(g.isnan().logical_and(w.isnan()));
  const at::Tensor nonfinite = g.isfinite().logical_and(w.isfinite()).logical_not();
  if (nonfinite.logical_and(same.logical_not()).any().item<bool>()) {
    return std::numeric_limits<double>::infinity();
  }
  const at::Tensor finite = nonfinite.logical_not();
  const double num = (g - w).masked_fill(finite.logical_not(), 0.0).norm().item<double>();
  const double den = w.masked_fill(finite.logical_not(), 0.0).norm().item<double>();
  return den > 0 ? num / den : num;
}

at::Tensor numeric_grad(const std::function<at::Tensor()>& f, const at::Tensor& input,
                        double step) {
  at::NoGradGuard no_grad;
  at::Tensor flat = input.detach().view({-1});
  at::Tensor grad = at::zeros({flat.numel()}, at::kDouble);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double x0 = flat[i].item<double>();
    flat[i].fill_(x0 + step);
    const double up = f().item<double>();
    flat[i].fill_(x0 - step);
    const double down = f().item<double>();
    flat[i].fill_(x0);
    grad[i] = (up - down) / (2 * step);
  }
  return grad.view(input.sizes());
}

}  // namespace brrr::test
