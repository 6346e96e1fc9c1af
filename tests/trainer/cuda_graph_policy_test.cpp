// train.cuda_graph on any machine: what auto/true/false resolve to for each condition, the
// messages, and the trainer's handling of the key on a CPU run.
#include "trainer/cuda_graph_policy.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/trainer/trainer_test_util.h"

namespace brrr {
namespace {

CudaGraphConditions capturable() {
  CudaGraphConditions c;
  c.setting = "auto";
  c.device = c10::Device(c10::kCUDA, 0);
  c.graphs_built = true;
  c.fused_optimizer = true;
  c.world_size = 1;
  return c;
}

TEST(GraphPolicyTest, AutoCapturesWhenEveryConditionHolds) {
  const CudaGraphDecision d = decide_cuda_graph(capturable());
  EXPECT_EQ(d.mode, GraphMode::kTry);
  EXPECT_EQ(d.reason, "");
  EXPECT_FALSE(d.refused);
}

TEST(GraphPolicyTest, TrueRequiresAndFalseTurnsOff) {
  CudaGraphConditions c = capturable();
  c.setting = "true";
  EXPECT_EQ(decide_cuda_graph(c).mode, GraphMode::kRequire);
  c.setting = "false";
  const CudaGraphDecision off = decide_cuda_graph(c);
  EXPECT_EQ(off.mode, GraphMode::kOff);
  EXPECT_EQ(off.reason, "train.cuda_graph is false");
  EXPECT_FALSE(off.refused);
}

TEST(GraphPolicyTest, AutoIsOffOnTheCpuWithTheReason) {
  CudaGraphConditions c = capturable();
  c.device = c10::Device(c10::kCPU);
  const CudaGraphDecision d = decide_cuda_graph(c);
  EXPECT_EQ(d.mode, GraphMode::kOff);
  EXPECT_FALSE(d.refused);
  EXPECT_EQ(d.reason, "the run is on cpu (CUDA graphs need a CUDA device)");
}

TEST(GraphPolicyTest, EachBlockerIsNamedAndTrueIsRefused) {
  struct Case {
    const char* name;
    void (*spoil)(CudaGraphConditions&);
    const char* expected;
  };
  const Case cases[] = {
      {"cpu", [](CudaGraphConditions& c) { c.device = c10::Device(c10::kCPU); }, "cpu"},
      {"no cuda build", [](CudaGraphConditions& c) { c.graphs_built = false; },
       "built without CUDA"},
      {"foreach optimizer", [](CudaGraphConditions& c) { c.fused_optimizer = false; },
       "optim.fused is false"},
      {"2 ranks",
       [](CudaGraphConditions& c) {
         c.data_parallel = true;
         c.world_size = 2;
       },
       "data-parallel (2 ranks)"},
      {"1 NCCL rank", [](CudaGraphConditions& c) { c.data_parallel = true; },
       "data-parallel (1 rank)"},
  };
  for (const Case& k : cases) {
    for (const char* setting : {"auto", "true"}) {
      CudaGraphConditions c = capturable();
      c.setting = setting;
      k.spoil(c);
      const CudaGraphDecision d = decide_cuda_graph(c);
      EXPECT_EQ(d.mode, GraphMode::kOff) << k.name << ", " << setting;
      EXPECT_NE(d.reason.find(k.expected), std::string::npos) << k.name << ": " << d.reason;
      EXPECT_EQ(d.refused, std::string(setting) == "true") << k.name << ", " << setting;
    }
  }
}

TEST(GraphPolicyTest, TheFirstFailingConditionIsTheReason) {
  CudaGraphConditions c = capturable();
  c.fused_optimizer = false;
  c.data_parallel = true;
  c.world_size = 4;
  EXPECT_NE(decide_cuda_graph(c).reason.find("optim.fused"), std::string::npos);
}

TEST(GraphPolicyTest, AnUnknownSettingIsAConfigError) {
  CudaGraphConditions c = capturable();
  c.setting = "yes";
  try {
    decide_cuda_graph(c);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.cuda_graph: unknown value 'yes'"),
              std::string::npos)
        << e.what();
  }
}

TEST(GraphPolicyTest, RefusedCaptureMessagesSayWhy) {
  const std::string sync = capture_refused_message("CUDA error: operation not permitted", true);
  EXPECT_NE(sync.find("synchronises the host with the device"), std::string::npos) << sync;
  EXPECT_NE(sync.find(".item()"), std::string::npos) << sync;
  EXPECT_NE(sync.find("CUDA error: operation not permitted"), std::string::npos) << sync;
  const std::string other = capture_refused_message("some op refused", false);
  EXPECT_NE(other.find("refused CUDA-graph capture: some op refused"), std::string::npos) << other;
  EXPECT_EQ(other.find("synchronises"), std::string::npos) << other;
}

TEST(GraphPolicyTest, ConfigRejectsAnUnknownValueWithItsLine) {
  try {
    parse_config("run: {name: x}\ntrain: {cuda_graph: maybe}\n");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train.cuda_graph"), std::string::npos) << what;
    EXPECT_NE(what.find("maybe"), std::string::npos) << what;
  }
}

TEST(GraphPolicyTest, TrainerResolvesAutoToOffOnTheCpuAndRefusesTrue) {
  ExperimentConfig config = base_config(temp_dir("graph_policy"));
  config.train.cuda_graph = "auto";
  BlobTrainer automatic(config);
  const std::string plan = automatic.plan();
  EXPECT_NE(plan.find("cuda graph  off: the run is on cpu"), std::string::npos) << plan;

  config.train.cuda_graph = "true";
  config.origins["train.cuda_graph"] = "exp.yaml:7:22";
  BlobTrainer forced(config);
  try {
    forced.setup();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train.cuda_graph at exp.yaml:7:22: true, but this run's step cannot be "
                        "captured: the run is on cpu"),
              std::string::npos)
        << what;
  }
}

TEST(GraphPolicyTest, ACpuRunRecordsWhyItsStepWasNotCaptured) {
  ExperimentConfig config = base_config(temp_dir("graph_summary"));
  config.train.max_steps = 3;
  BlobTrainer trainer(config);
  trainer.fit();
  const MetricRecord& summary = trainer.history().back();
  ASSERT_EQ(summary.kind, RecordKind::kSummary);
  EXPECT_EQ(summary.text.at("cuda_graph"),
            "off: the run is on cpu (CUDA graphs need a CUDA device)");
}

}  // namespace
}  // namespace brrr
