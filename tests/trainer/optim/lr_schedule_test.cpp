#include "trainer/optim/lr_schedule.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
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

ScheduleOptions options_from(const c10::Dict<c10::IValue, c10::IValue>& d) {
  ScheduleOptions o;
  o.name = d.at("name").toStringRef();
  o.warmup_steps = d.at("warmup_steps").toInt();
  o.min_lr_ratio = d.at("min_lr_ratio").toDouble();
  o.step_size = d.at("step_size").toInt();
  o.gamma = d.at("gamma").toDouble();
  o.decay_ratio = d.at("decay_ratio").toDouble();
  o.mode = d.at("mode").toStringRef();
  o.patience = d.at("patience").toInt();
  o.factor = d.at("factor").toDouble();
  o.threshold = d.at("threshold").toDouble();
  return o;
}

std::unique_ptr<LrSchedule> schedule_for(const c10::Dict<c10::IValue, c10::IValue>& c) {
  return make_lr_schedule(options_from(c.at("options").toGenericDict()), c.at("base_lr").toDouble(),
                          c.at("max_steps").toInt());
}

void expect_close(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-12 * std::abs(want) + 1e-18) << what;
}

TEST(LrScheduleTest, EveryStepMatchesPyTorchLambdaLrAndStepLr) {
  const auto golden = load_golden("optim_schedules.pt");
  int checked = 0;
  for (const auto& entry : golden) {
    const auto c = entry.value().toGenericDict();
    if (c.contains("metrics")) continue;  // plateau cases: see below
    const std::string label = entry.key().toStringRef();
    auto schedule = schedule_for(c);
    const auto lrs = c.at("lrs").toTensor();
    ASSERT_EQ(lrs.size(0), schedule->max_steps()) << label;
    for (int64_t k = 0; k < lrs.size(0); ++k) {
      expect_close(schedule->lr_at(k), lrs[k].item<double>(), label + " step " + std::to_string(k));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

TEST(LrScheduleTest, PlateauMatchesReduceLrOnPlateau) {
  const auto golden = load_golden("optim_schedules.pt");
  for (const char* label : {"plateau_min", "plateau_max"}) {
    const auto c = golden.at(label).toGenericDict();
    auto schedule = schedule_for(c);
    const auto metrics = c.at("metrics").toTensor();
    const auto lrs = c.at("lrs").toTensor();
    expect_close(schedule->lr_at(0), c.at("base_lr").toDouble(), label);
    for (int64_t i = 0; i < metrics.size(0); ++i) {
      schedule->on_eval(metrics[i].item<double>());
      expect_close(schedule->lr_at(i + 1), lrs[i].item<double>(),
                   std::string(label) + " after eval " + std::to_string(i));
    }
  }
}

TEST(LrScheduleTest, PlateauStateSurvivesSaveLoad) {
  const auto c = load_golden("optim_schedules.pt").at("plateau_min").toGenericDict();
  const auto metrics = c.at("metrics").toTensor();
  auto a = schedule_for(c);
  const int64_t split = 8;  // mid-way through a run of bad evaluations
  for (int64_t i = 0; i < split; ++i) a->on_eval(metrics[i].item<double>());
  torch::serialize::OutputArchive out;
  a->save(out);
  std::stringstream buffer;
  out.save_to(buffer);
  auto b = schedule_for(c);
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  b->load(in);
  for (int64_t i = split; i < metrics.size(0); ++i) {
    a->on_eval(metrics[i].item<double>());
    b->on_eval(metrics[i].item<double>());
    EXPECT_EQ(a->lr_at(100), b->lr_at(100)) << "eval " << i;
  }
}

TEST(LrScheduleTest, LoadRejectsAnotherScheduleKind) {
  ScheduleOptions cosine;
  cosine.name = "cosine";
  torch::serialize::OutputArchive out;
  make_lr_schedule(cosine, 1e-3, 100)->save(out);
  std::stringstream buffer;
  out.save_to(buffer);
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  ScheduleOptions linear;
  linear.name = "linear";
  EXPECT_THROW(make_lr_schedule(linear, 1e-3, 100)->load(in), CheckpointError);
}

TEST(LrScheduleTest, HoldsTheFinalValueBeyondMaxSteps) {
  ScheduleOptions o;
  o.name = "cosine";
  o.warmup_steps = 10;
  o.min_lr_ratio = 0.1;
  auto s = make_lr_schedule(o, 1.0, 100);
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.1);
  EXPECT_DOUBLE_EQ(s->lr_at(1000), 0.1);
  EXPECT_EQ(s->lr_at(0), 0.0);
  EXPECT_THROW(s->lr_at(-1), Error);
}

TEST(LrScheduleTest, BadOptionsThrowConfigErrorNamingTheKey) {
  auto expect_key = [](ScheduleOptions o, const std::string& key) {
    try {
      make_lr_schedule(o, 1e-3, 100);
      ADD_FAILURE() << "accepted bad " << key;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  ScheduleOptions o;
  o.name = "exponential";
  expect_key(o, "schedule.name");
  o = ScheduleOptions{};
  o.name = "plateau";
  o.mode = "median";
  expect_key(o, "schedule.mode");
  o = ScheduleOptions{};
  o.warmup_steps = 101;
  expect_key(o, "schedule.warmup_steps");
  o = ScheduleOptions{};
  o.name = "wsd";
  o.decay_ratio = 1.5;
  expect_key(o, "schedule.decay_ratio");
}

}  // namespace
}  // namespace brrr
