#include "trainer/optim/optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "trainer/optim/lr_schedule.h"

namespace brrr {
namespace {

using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

c10::Dict<c10::IValue, c10::IValue> load_golden(const std::string& file) {
  const std::string path = std::string(BRRR_GOLDEN_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing golden file " + path + " (tests/golden/make_all.py)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toGenericDict();
}

/// The golden's 4 parameters (2 matrices, 2 vectors) and per-step gradients.
struct Problem {
  std::vector<std::string> names;
  std::vector<torch::Tensor> init;
  std::vector<std::vector<torch::Tensor>> grads;  // [step][param]
  c10::IValue cases;  // dict: case label -> {options..., "trajectory": [step][name]}
};

const Problem& problem() {
  static const Problem p = [] {
    Problem out;
    const auto golden = load_golden("optim_trajectories.pt");
    const auto init = golden.at("init").toGenericDict();
    const auto names = golden.at("param_names").toList();
    for (size_t i = 0; i < names.size(); ++i) {
      out.names.push_back(names.get(i).toStringRef());
      out.init.push_back(init.at(out.names.back()).toTensor());
    }
    const auto steps = golden.at("grads").toList();
    for (size_t k = 0; k < steps.size(); ++k) {
      const auto d = steps.get(k).toGenericDict();
      std::vector<torch::Tensor> g;
      for (const auto& name : out.names) g.push_back(d.at(name).toTensor());
      out.grads.push_back(g);
    }
    out.cases = golden.at("cases");
    return out;
  }();
  return p;
}

NamedParams fresh_params(const std::vector<torch::Tensor>& values) {
  NamedParams out;
  for (size_t i = 0; i < values.size(); ++i) {
    out.emplace_back(problem().names[i], values[i].clone().requires_grad_(true));
  }
  return out;
}

OptimOptions case_options(const c10::Dict<c10::IValue, c10::IValue>& c) {
  OptimOptions o;
  o.name = c.at("name").toStringRef();
  o.lr = c.at("lr").toDouble();
  o.momentum = c.at("momentum").toDouble();
  o.nesterov = c.at("nesterov").toBool();
  o.weight_decay = c.at("weight_decay").toDouble();
  const auto betas = c.at("betas").toList();
  o.betas = {betas.get(0).toDouble(), betas.get(1).toDouble()};
  o.eps = c.at("eps").toDouble();
  o.fused = c.at("fused").toBool() ? "true" : "false";
  return o;
}

void set_grads(const NamedParams& params, const std::vector<torch::Tensor>& grads,
               double scale = 1.0) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].second.mutable_grad() = grads[i].clone() * scale;
  }
}

double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs() / b.abs().clamp_min(1e-6)).max().item<double>();
}

TEST(OptimizerTest, TrajectoriesMatchTorchOptimForeachAndFused) {
  int checked = 0;
  for (const auto& entry : problem().cases.toGenericDict()) {
    ++checked;
    const std::string label = entry.key().toStringRef();
    const auto c = entry.value().toGenericDict();
    const OptimOptions options = case_options(c);
    NamedParams params = fresh_params(problem().init);
    auto optimizer = make_optimizer(options, params, torch::kCPU);
    ASSERT_EQ(optimizer->fused(), options.fused == "true") << label;
    const auto trajectory = c.at("trajectory").toList();
    for (size_t step = 0; step < trajectory.size(); ++step) {
      set_grads(params, problem().grads[step]);
      optimizer->step();
      const auto expected = trajectory.get(step).toGenericDict();
      for (const auto& [name, p] : params) {
        const auto want = expected.at(name).toTensor();
        if (options.fused == "false") {
          // Same op sequence as torch's foreach implementation: bit-identical.
          EXPECT_TRUE(torch::equal(p.detach(), want))
              << label << " step " << step << " " << name << " rel " << max_rel_diff(p, want);
        } else {
          EXPECT_LE(max_rel_diff(p.detach(), want), 1e-6)
              << label << " step " << step << " " << name;
        }
      }
    }
  }
  EXPECT_EQ(checked, 10);  // 5 configurations x (foreach, fused)
}

TEST(OptimizerTest, OneDimParamsGoToAGroupWithoutWeightDecay) {
  OptimOptions o;
  o.weight_decay = 0.1;
  auto opt = make_optimizer(o, fresh_params(problem().init), torch::kCPU);
  ASSERT_EQ(opt->groups().size(), 2u);
  EXPECT_EQ(opt->groups()[0].params.size(), 2u);
  EXPECT_EQ(opt->groups()[0].weight_decay, 0.1);
  EXPECT_EQ(opt->groups()[1].params.size(), 2u);
  EXPECT_EQ(opt->groups()[1].weight_decay, 0.0);
  for (const auto& p : opt->groups()[1].params) EXPECT_LT(p.dim(), 2);
  o.no_decay_1d = false;
  auto single = make_optimizer(o, fresh_params(problem().init), torch::kCPU);
  ASSERT_EQ(single->groups().size(), 1u);
  EXPECT_EQ(single->groups()[0].params.size(), 4u);
}

/// Steps 0..k-1, saves, loads into a new optimizer over copies of the parameters, and checks the
/// remaining steps of both runs are bit-identical.
void expect_exact_resume(OptimOptions o) {
  NamedParams a = fresh_params(problem().init);
  auto opt_a = make_optimizer(o, a, torch::kCPU);
  const size_t split = 2;
  for (size_t step = 0; step < split; ++step) {
    set_grads(a, problem().grads[step]);
    opt_a->step();
  }
  torch::serialize::OutputArchive out;
  opt_a->save(out);
  std::stringstream buffer;
  out.save_to(buffer);

  std::vector<torch::Tensor> current;
  for (const auto& [name, p] : a) current.push_back(p.detach());
  NamedParams b = fresh_params(current);
  auto opt_b = make_optimizer(o, b, torch::kCPU);
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  opt_b->load(in);
  for (size_t step = split; step < problem().grads.size(); ++step) {
    set_grads(a, problem().grads[step]);
    set_grads(b, problem().grads[step]);
    opt_a->step();
    opt_b->step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second))
        << o.name << " fused=" << o.fused << " " << a[i].first;
  }
}

TEST(OptimizerTest, SaveLoadMidTrajectoryContinuesBitIdentically) {
  for (const char* fused : {"false", "true"}) {
    OptimOptions adamw;
    adamw.name = "adamw";
    adamw.lr = 0.01;
    adamw.weight_decay = 0.1;
    adamw.fused = fused;
    expect_exact_resume(adamw);
    OptimOptions sgd;
    sgd.name = "sgd";
    sgd.lr = 0.1;
    sgd.momentum = 0.9;
    sgd.nesterov = true;
    sgd.fused = fused;
    expect_exact_resume(sgd);
  }
}

TEST(OptimizerTest, FoundInfSkipsTheWholeStepIncludingState) {
  for (const char* name : {"adamw", "sgd"}) {
    for (const char* fused : {"false", "true"}) {
      OptimOptions o;
      o.name = name;
      o.momentum = 0.9;
      o.fused = fused;
      NamedParams skipped = fresh_params(problem().init);
      NamedParams reference = fresh_params(problem().init);
      auto opt = make_optimizer(o, skipped, torch::kCPU);
      auto ref = make_optimizer(o, reference, torch::kCPU);
      const auto inf = torch::ones({});
      const auto ok = torch::zeros({});
      // Skipped step (found_inf = 1) first, then a normal one: must equal one normal step.
      set_grads(skipped, problem().grads[0], 1e3);
      opt->step(nullptr, &inf);
      for (size_t i = 0; i < skipped.size(); ++i) {
        EXPECT_TRUE(torch::equal(skipped[i].second, problem().init[i])) << name << " " << fused;
      }
      set_grads(skipped, problem().grads[1]);
      opt->step(nullptr, &ok);
      set_grads(reference, problem().grads[1]);
      ref->step();
      for (size_t i = 0; i < skipped.size(); ++i) {
        EXPECT_TRUE(torch::equal(skipped[i].second, reference[i].second)) << name << " " << fused;
      }
      if (std::string(name) == "adamw") {
        EXPECT_EQ(opt->state(0).step.item<float>(), 1.0f) << fused;
      }
    }
  }
}

TEST(OptimizerTest, GradScaleArgumentUnscalesInsideTheStep) {
  for (const char* fused : {"false", "true"}) {
    OptimOptions o;
    o.fused = fused;
    NamedParams scaled = fresh_params(problem().init);
    NamedParams plain = fresh_params(problem().init);
    auto opt = make_optimizer(o, scaled, torch::kCPU);
    auto ref = make_optimizer(o, plain, torch::kCPU);
    const auto scale = torch::full({}, 4096.0f);
    set_grads(scaled, problem().grads[0], 4096.0);
    set_grads(plain, problem().grads[0]);
    opt->step(&scale, nullptr);
    ref->step();
    for (size_t i = 0; i < scaled.size(); ++i) {
      EXPECT_LE(max_rel_diff(scaled[i].second.detach(), plain[i].second.detach()), 1e-6) << fused;
    }
  }
}

TEST(OptimizerTest, ParamsWithoutGradKeepValueAndGetNoState) {
  OptimOptions o;
  NamedParams params = fresh_params(problem().init);
  auto opt = make_optimizer(o, params, torch::kCPU);
  set_grads(params, problem().grads[0]);
  params[1].second.mutable_grad() = torch::Tensor();  // fc1.bias: no gradient this step
  opt->step();
  EXPECT_TRUE(torch::equal(params[1].second, problem().init[1]));
  EXPECT_FALSE(torch::equal(params[0].second, problem().init[0]));
  // fc1.bias is the first parameter of the no-decay group: flat index 2.
  EXPECT_FALSE(opt->state(2).step.defined());
  EXPECT_TRUE(opt->state(0).step.defined());
}

TEST(OptimizerTest, ZeroGradDropsOrZeroesGradients) {
  NamedParams params = fresh_params(problem().init);
  auto opt = make_optimizer(OptimOptions{}, params, torch::kCPU);
  set_grads(params, problem().grads[0]);
  opt->zero_grad(/*set_to_none=*/false);
  for (const auto& [name, p] : params) EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f);
  opt->zero_grad();
  for (const auto& [name, p] : params) EXPECT_FALSE(p.grad().defined()) << name;
}

TEST(OptimizerTest, BadOptionsThrowConfigErrorNamingTheKey) {
  auto expect_key = [](OptimOptions o, const std::string& key) {
    try {
      make_optimizer(o, fresh_params(problem().init), torch::kCPU);
      ADD_FAILURE() << "accepted bad " << key;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  OptimOptions o;
  o.name = "lion";
  expect_key(o, "optim.name");
  o = OptimOptions{};
  o.fused = "maybe";
  expect_key(o, "optim.fused");
  o = OptimOptions{};
  o.betas = {0.9, 1.5};
  expect_key(o, "optim.betas");
}

TEST(OptimizerTest, ParameterOnAnotherDtypeIsNamedInTheError) {
  NamedParams params = fresh_params(problem().init);
  params[3].second = params[3].second.detach().to(torch::kDouble).requires_grad_(true);
  try {
    make_optimizer(OptimOptions{}, params, torch::kCPU);
    FAIL() << "mixed dtypes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("norm.weight"), std::string::npos) << e.what();
  }
}

TEST(OptimizerTest, FusedCudaAdamWMatchesCpuForeach) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  OptimOptions o;
  o.weight_decay = 0.1;
  NamedParams cpu = fresh_params(problem().init);
  NamedParams cuda;
  for (const auto& [name, p] : cpu) {
    cuda.emplace_back(name, p.detach().to(torch::kCUDA).requires_grad_(true));
  }
  auto opt_cpu = make_optimizer(o, cpu, torch::kCPU);
  auto opt_cuda = make_optimizer(o, cuda, torch::kCUDA);
  ASSERT_TRUE(opt_cuda->fused());
  const auto no_inf = torch::zeros({}, torch::kCUDA);
  for (const auto& grads : problem().grads) {
    set_grads(cpu, grads);
    for (size_t i = 0; i < cuda.size(); ++i) cuda[i].second.mutable_grad() = grads[i].cuda();
    opt_cpu->step();
    opt_cuda->step(nullptr, &no_inf);
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_LE(max_rel_diff(cuda[i].second.detach().cpu(), cpu[i].second.detach()), 1e-5);
  }
}

}  // namespace
}  // namespace brrr

namespace brrr {
namespace {

// The bounds of optim.lr are the config schema's, whichever door the value comes through, and a
// tiny value is printed as it is (an lr of 1e-9 must not read "0.000000").
TEST(OptimizerTest, LearningRateBoundsAgreeWithTheConfigAndPrintExactly) {
  for (const double lr : {0.0, -1e-9}) {
    const std::string text = fmt::format("optim: {{lr: {}}}", lr);
    std::string config_error, optimizer_error, schedule_error;
    try {
      ExperimentConfig c = parse_config("model: {name: mlp}\ndata: {dataset: csv}\n" + text);
    } catch (const ConfigError& e) {
      config_error = e.what();
    }
    OptimOptions o;
    o.lr = lr;
    try {
      make_optimizer(o, fresh_params(problem().init), torch::kCPU);
    } catch (const ConfigError& e) {
      optimizer_error = e.what();
    }
    try {
      make_lr_schedule(ScheduleOptions{}, lr, 10);
    } catch (const ConfigError& e) {
      schedule_error = e.what();
    }
    EXPECT_NE(config_error.find("optim.lr"), std::string::npos) << "lr " << lr;
    EXPECT_NE(optimizer_error.find("optim.lr must be > 0"), std::string::npos) << optimizer_error;
    EXPECT_NE(schedule_error.find("optim.lr must be > 0"), std::string::npos) << schedule_error;
    if (lr < 0) {
      EXPECT_NE(optimizer_error.find("got -1e-09"), std::string::npos) << optimizer_error;
      EXPECT_NE(schedule_error.find("got -1e-09"), std::string::npos) << schedule_error;
    }
  }
}

}  // namespace
}  // namespace brrr
