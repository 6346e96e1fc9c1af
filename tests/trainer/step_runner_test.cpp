// StepRunner alone on CPU: one step of it equals the hand-written sequence (forward, loss /
// accum, backward per micro-batch; clip; lr of the step; optimizer step; zero_grad) bit for bit,
// and its window accumulators hold the mean loss, the lr and the first non-finite step.
#include "trainer/step_runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>

#include "core/config.h"
#include "models/model.h"
#include "models/registry.h"
#include "trainer/optim/grad_clip.h"
#include "trainer/optim/grad_scaler.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizer.h"

namespace brrr {
namespace {

struct Parts {
  std::shared_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<GradScaler> scaler;
  std::vector<at::Tensor> params;
};

Parts make_setup() {
  torch::manual_seed(3);
  ModelOptions m;
  m.name = "mlp";
  m.in_channels = 6;
  m.image_size = 1;
  m.num_classes = 4;
  m.hidden_sizes = {10};
  Parts s;
  s.model = make_model(m);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : s.model->named_parameters()) {
    named.emplace_back(p.key(), p.value());
    s.params.push_back(p.value());
  }
  OptimOptions o;
  o.name = "adamw";
  o.lr = 0.05;
  o.weight_decay = 0.1;
  o.fused = "false";
  s.optimizer = make_optimizer(o, named, c10::Device(c10::kCPU));
  ScheduleOptions sched;
  sched.name = "cosine";
  sched.warmup_steps = 2;
  s.schedule = make_lr_schedule(sched, o.lr, 10);
  s.scaler = std::make_unique<GradScaler>(GradScalerOptions{}, false, c10::Device(c10::kCPU));
  return s;
}

std::vector<Batch> micro_batches() {
  torch::manual_seed(7);
  std::vector<Batch> out;
  for (int i = 0; i < 2; ++i) {
    out.push_back({{"features", at::randn({5, 6})}, {"label", at::randint(0, 4, {5}, at::kLong)}});
  }
  return out;
}

StepOutput loss_of(Model& model, const Batch& batch) {
  StepOutput out;
  out.loss = at::cross_entropy_loss(model.forward(batch.at("features")), batch.at("label"));
  out.examples = 5;
  return out;
}

TEST(StepRunnerTest, OneStepEqualsTheHandWrittenSequence) {
  const std::vector<Batch> batches = micro_batches();
  const int64_t kStep = 3;       // a step inside the cosine decay: the lr of step 3 must be used
  const double kMaxNorm = 0.05;  // small enough to clip

  Parts hand = make_setup();
  double hand_loss = 0;
  for (const Batch& b : batches) {
    const at::Tensor loss = loss_of(*hand.model, b).loss;
    hand_loss += loss.item<double>() / 2.0;
    (loss / 2.0).backward();
  }
  clip_grad_norm(hand.params, kMaxNorm);
  hand.optimizer->set_lr(hand.schedule->lr_at(kStep));
  hand.optimizer->step();
  hand.optimizer->zero_grad();

  Parts run = make_setup();
  StepRunnerOptions options;
  options.grad_accum_steps = 2;
  options.max_grad_norm = kMaxNorm;
  StepRunner runner(options, run.params, *run.optimizer, *run.schedule, *run.scaler,
                    [&](const Batch& b) { return loss_of(*run.model, b); });
  size_t next = 0;
  WindowAccumulators window;
  window.reset(c10::Device(c10::kCPU));
  runner.run(
      kStep,
      [&] {
        return FetchedBatch{batches.at(next++), 0.0, {}};
      },
      window, nullptr, false);

  EXPECT_EQ(next, 2u) << "one micro-batch per accumulation step";
  ASSERT_EQ(run.params.size(), hand.params.size());
  for (size_t i = 0; i < run.params.size(); ++i) {
    EXPECT_TRUE(at::equal(run.params[i], hand.params[i])) << "parameter " << i;
    EXPECT_FALSE(run.params[i].grad().defined()) << "gradients are dropped after the step";
  }
  EXPECT_EQ(window.steps, 1);
  EXPECT_EQ(window.examples, 10);
  EXPECT_DOUBLE_EQ(window.last_lr, run.schedule->lr_at(kStep));
  EXPECT_NEAR(window.loss_sum.item<double>(), hand_loss, 1e-6);
  EXPECT_EQ(window.first_bad.item<int64_t>(), -1);
  EXPECT_TRUE(window.grad_norm.defined()) << "clipping computes the norm";
}

TEST(StepRunnerTest, RemembersTheFirstNonFiniteStepOnTheDevice) {
  const std::vector<Batch> batches = micro_batches();
  Parts run = make_setup();
  StepRunnerOptions options;  // no clipping, no accumulation
  int64_t calls = 0;
  StepRunner runner(options, run.params, *run.optimizer, *run.schedule, *run.scaler,
                    [&](const Batch& b) {
                      StepOutput out = loss_of(*run.model, b);
                      if (++calls >= 2)
                        out.loss = out.loss * std::numeric_limits<float>::quiet_NaN();
                      return out;
                    });
  WindowAccumulators window;
  window.reset(c10::Device(c10::kCPU));
  for (int64_t step = 0; step < 3; ++step) {
    runner.run(
        step,
        [&] {
          return FetchedBatch{batches[0], 0.0, {}};
        },
        window, nullptr, false);
  }
  EXPECT_EQ(window.first_bad.item<int64_t>(), 1) << "steps 1 and 2 were NaN; the first is kept";
  EXPECT_TRUE(std::isnan(window.bad_loss.item<float>()));
  EXPECT_FALSE(window.grad_norm.defined()) << "no clipping and no log: no norm computed";
  runner.run(
      3,
      [&] {
        return FetchedBatch{batches[0], 0.0, {}};
      },
      window, nullptr, true);
  EXPECT_TRUE(window.grad_norm.defined()) << "a logging step asks for the norm";
}

}  // namespace
}  // namespace brrr
