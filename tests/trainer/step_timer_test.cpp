// The step-time breakdown on the CPU path (host clocks): phases are attributed to the right
// bucket and, with `other`, sum to the measured step time. The Kineto trace recorder writes a
// Chrome trace that names the ops it saw.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "trainer/profiler.h"
#include "trainer/step_timer.h"

namespace brrr {
namespace {

void busy_for(double ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(StepTimerTest, PhasesSumToTheStepTimeOnCpu) {
  StepTimer timer(c10::Device(c10::kCPU));
  for (int step = 0; step < 3; ++step) {
    timer.step_begin();
    busy_for(4);  // waiting for data
    timer.add_data_wait(0.004);
    for (int micro = 0; micro < 2; ++micro) {
      timer.mark(StepTimer::Mark::kForwardBegin);
      busy_for(6);
      timer.mark(StepTimer::Mark::kForwardEnd);
      busy_for(9);
      timer.mark(StepTimer::Mark::kBackwardEnd);
    }
    busy_for(3);
    timer.mark(StepTimer::Mark::kOptimizerEnd);
    busy_for(2);  // logging, callbacks
    timer.step_end();
  }
  const StepBreakdown b = timer.collect();
  EXPECT_EQ(b.steps, 3);
  EXPECT_NEAR(b.forward_ms, 12.0, 2.0);
  EXPECT_NEAR(b.backward_ms, 18.0, 2.0);
  EXPECT_NEAR(b.optimizer_ms, 3.0, 1.0);
  EXPECT_NEAR(b.data_wait_ms, 4.0, 1e-9);
  // The measured step (4 + 2 x (6 + 9) + 3 + 2 ms) is accounted for: what no phase claims is the
  // 2 ms of "logging" at the end.
  EXPECT_NEAR(b.step_ms, 39.0, 4.0);
  EXPECT_NEAR(b.other_ms, 2.0, 1.5);
  EXPECT_EQ(b.gpu_idle_ms, 0.0);      // no GPU timeline on the CPU
  // The window restarts: nothing left over.
  EXPECT_EQ(timer.collect().steps, 0);
}

TEST(TraceRecorderTest, WritesAChromeTraceOfTheRecordedOps) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("brrr_trace_" + std::to_string(::getpid()) + ".json");
  {
    TraceRecorder recorder(path.string(), c10::Device(c10::kCPU));
    const at::Tensor a = at::randn({64, 64});
    const at::Tensor b = at::mm(a, a);
    (void)b;
    recorder.stop();
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("traceEvents"), std::string::npos);
  EXPECT_NE(text.str().find("aten::mm"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace brrr
