#include "trainer/optim/grad_scaler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace brrr {
namespace {

c10::Dict<c10::IValue, c10::IValue> load_golden(const std::string& file) {
  const std::string path = std::string(BRRR_GOLDEN_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing golden file " + path + " (tests/golden/make_all.py)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

GradScalerOptions small_options(int64_t growth_interval) {
  GradScalerOptions o;
  o.init_scale = 1024.0;
  o.growth_interval = growth_interval;
  return o;
}

/// One "backward" of loss = sum(p * g): p.grad = scale * g.
void backward(GradScaler& scaler, const torch::Tensor& p, const torch::Tensor& g) {
  p.mutable_grad() = torch::Tensor();
  scaler.scale((p * g).sum()).backward();
}

TEST(GradScalerTest, MatchesTorchAmpGradScalerOverASequenceWithInfAndNan) {
  const auto golden = load_golden("optim_grad_scaler.pt");
  const auto opts = golden.at("options").toGenericDict();
  GradScalerOptions o;
  o.init_scale = opts.at("init_scale").toDouble();
  o.growth_factor = opts.at("growth_factor").toDouble();
  o.backoff_factor = opts.at("backoff_factor").toDouble();
  o.growth_interval = opts.at("growth_interval").toInt();
  GradScaler scaler(o, true, torch::kCPU);
  const double lr = golden.at("lr").toDouble();
  auto p = golden.at("init").toTensor().clone().requires_grad_(true);
  const auto grads = golden.at("grads").toList();
  const auto params = golden.at("params").toList();
  const auto scales = golden.at("scales").toTensor();
  for (size_t step = 0; step < grads.size(); ++step) {
    backward(scaler, p, grads.get(step).toTensor());
    scaler.unscale({p});
    {
      // The SGD step torch's scaler.step() runs unless found_inf.
      torch::NoGradGuard no_grad;
      if (scaler.found_inf().item<float>() == 0.0f) p.add_(p.grad(), -lr);
    }
    scaler.update();
    EXPECT_TRUE(torch::equal(p.detach(), params.get(step).toTensor())) << "step " << step;
    EXPECT_EQ(scaler.scale_value(), scales[step].item<double>()) << "step " << step;
  }
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(GradScalerTest, UnscaleDividesGradsExactlyAndReportsFinite) {
  GradScaler scaler(small_options(2000), true, torch::kCPU);
  auto p = torch::zeros({5}, torch::requires_grad());
  const auto g = torch::randn({5});
  backward(scaler, p, g);
  EXPECT_TRUE(torch::equal(p.grad(), g * 1024.0));
  scaler.unscale({p});
  EXPECT_TRUE(torch::equal(p.grad(), g));
  EXPECT_EQ(scaler.found_inf().item<float>(), 0.0f);
  EXPECT_EQ(scaler.found_inf().device(), torch::Device(torch::kCPU));
}

TEST(GradScalerTest, InjectedInfSetsFoundInfAndBacksOffByHalf) {
  GradScaler scaler(small_options(2000), true, torch::kCPU);
  auto a = torch::zeros({3}, torch::requires_grad());
  auto b = torch::zeros({2}, torch::requires_grad());
  a.mutable_grad() = torch::ones({3});
  b.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity()});
  scaler.unscale({a, b});
  EXPECT_EQ(scaler.found_inf().item<float>(), 1.0f);
  scaler.update();
  EXPECT_EQ(scaler.scale_value(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(GradScalerTest, GrowsOnlyAfterGrowthIntervalGoodSteps) {
  GradScaler scaler(small_options(3), true, torch::kCPU);
  auto p = torch::zeros({2}, torch::requires_grad());
  for (int step = 1; step <= 3; ++step) {
    p.mutable_grad() = torch::ones({2});
    scaler.unscale({p});
    scaler.update();
    EXPECT_EQ(scaler.scale_value(), step < 3 ? 1024.0 : 2048.0) << "after good step " << step;
  }
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScalerTest, DisabledScalerIsANoOp) {
  GradScaler scaler(GradScalerOptions{}, false, torch::kCPU);
  const auto loss = torch::tensor(3.0f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  auto p = torch::zeros({2}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({2.0f, std::numeric_limits<float>::infinity()});
  scaler.unscale({p});
  scaler.update();
  EXPECT_EQ(p.grad()[0].item<float>(), 2.0f);
  EXPECT_FALSE(scaler.found_inf().defined());
  EXPECT_EQ(scaler.scale_value(), 1.0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScalerTest, SaveLoadRestoresScaleTrackerAndCounters) {
  GradScaler a(small_options(2), true, torch::kCPU);
  auto p = torch::zeros({2}, torch::requires_grad());
  auto run_step = [&](GradScaler& s, bool finite) {
    p.mutable_grad() = finite ? torch::ones({2}) : torch::full({2}, NAN);
    s.unscale({p});
    s.update();
  };
  run_step(a, false);  // 1024 -> 512, skipped 1
  run_step(a, true);   // growth tracker 1
  std::stringstream buffer;
  torch::serialize::OutputArchive out;
  a.save(out);
  out.save_to(buffer);

  GradScaler b(GradScalerOptions{}, true, torch::kCPU);  // different options: restored from a
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  b.load(in);
  EXPECT_EQ(b.scale_value(), 512.0);
  EXPECT_EQ(b.skipped_steps(), 1);
  EXPECT_EQ(b.options().growth_interval, 2);
  // The restored tracker is 1, so the next good step grows both to 1024.
  run_step(a, true);
  run_step(b, true);
  EXPECT_EQ(a.scale_value(), 1024.0);
  EXPECT_EQ(b.scale_value(), 1024.0);
}

TEST(GradScalerTest, LoadingADisabledScalersArchiveIntoAnEnabledOneThrows) {
  torch::serialize::OutputArchive out;
  GradScaler(GradScalerOptions{}, false, torch::kCPU).save(out);
  std::stringstream buffer;
  out.save_to(buffer);
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  GradScaler enabled(GradScalerOptions{}, true, torch::kCPU);
  EXPECT_THROW(enabled.load(in), CheckpointError);
}

TEST(GradScalerTest, MisuseOfTheStepProtocolThrows) {
  GradScaler scaler(small_options(10), true, torch::kCPU);
  EXPECT_THROW(scaler.update(), Error);  // no unscale() this step
  auto p = torch::zeros({1}, torch::requires_grad());
  p.mutable_grad() = torch::ones({1});
  scaler.unscale({p});
  EXPECT_THROW(scaler.unscale({p}), Error);  // twice in one step
}

TEST(GradScalerTest, RejectsBadOptionsNamingTheKey) {
  GradScalerOptions o;
  o.growth_factor = 0.5;
  try {
    GradScaler scaler(o, true, torch::kCPU);
    FAIL() << "growth_factor 0.5 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.fp16.growth_factor"), std::string::npos);
  }
}

TEST(GradScalerTest, WorksOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  GradScaler scaler(small_options(2000), true, torch::kCUDA);
  auto p = torch::zeros({4}, torch::TensorOptions().device(torch::kCUDA).requires_grad(true));
  p.mutable_grad() = torch::tensor({1.0f, 2.0f, INFINITY, 4.0f}, torch::kCUDA);
  scaler.unscale({p});
  EXPECT_EQ(scaler.found_inf().device().type(), torch::kCUDA);
  scaler.update();
  EXPECT_EQ(scaler.scale_value(), 512.0);
}

}  // namespace
}  // namespace brrr
