// The step-time breakdown: phases are attributed to the right bucket and, with `other`, sum to the
// window's wall time per step, on the CPU path (host clocks) and on CUDA (events; GPU machine). The
// Kineto trace recorder writes a Chrome trace that names the ops it saw and, asked to, the
// allocations that scripts/memory_peak.py replays into what is alive at the peak.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <unistd.h>

#include "tests/test_fs.h"
#include "trainer/observe/profiler.h"
#include "trainer/observe/step_timer.h"

namespace brrr {
namespace {

void busy_for(double ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(StepTimerTest, PhasesSumToTheStepTimeOnCpu) {
  // The test keeps its own clock beside the timer's: each phase must equal the interval the test
  // measured around the same marks (a loaded machine stretches both alike), so a phase booked to
  // the wrong bucket shows, whatever the scheduler does.
  using Clock = std::chrono::steady_clock;
  auto ms_between = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  StepTimer timer(c10::Device(c10::kCPU));
  double forward = 0, backward = 0, optimizer = 0;
  const auto window_begin = Clock::now();
  for (int s = 0; s < 3; ++s) {
    timer.step_begin();
    busy_for(4);  // waiting for data
    timer.add_data_wait(0.004);
    Clock::time_point last;
    for (int micro = 0; micro < 2; ++micro) {
      timer.mark(StepTimer::Mark::kForwardBegin);
      const auto f0 = Clock::now();
      busy_for(6);
      const auto f1 = Clock::now();
      timer.mark(StepTimer::Mark::kForwardEnd);
      busy_for(9);
      last = Clock::now();
      timer.mark(StepTimer::Mark::kBackwardEnd);
      forward += ms_between(f0, f1);
      backward += ms_between(f1, last);
    }
    busy_for(3);
    const auto o1 = Clock::now();
    timer.mark(StepTimer::Mark::kOptimizerEnd);
    optimizer += ms_between(last, o1);
    busy_for(2);  // logging, callbacks
    timer.step_end();
  }
  const double step = ms_between(window_begin, Clock::now());  // the window's wall time
  const StepBreakdown b = timer.collect();
  EXPECT_EQ(b.steps, 3);
  constexpr double kSlack = 0.5;  // ms per step: the clock reads the test and the timer do apart
  EXPECT_NEAR(b.forward_ms, forward / 3, kSlack);
  EXPECT_NEAR(b.backward_ms, backward / 3, kSlack);
  EXPECT_NEAR(b.optimizer_ms, optimizer / 3, kSlack);
  EXPECT_NEAR(b.step_ms, step / 3, kSlack);
  EXPECT_GE(b.forward_ms, 12.0);  // busy time is a floor whatever the load
  EXPECT_GE(b.backward_ms, 18.0);
  EXPECT_GE(b.optimizer_ms, 3.0);
  EXPECT_NEAR(b.data_wait_ms, 4.0, 1e-9);
  // The step is accounted for: phases plus `other` (here the 2 ms of "logging") are the step.
  EXPECT_NEAR(b.data_wait_ms + b.forward_ms + b.backward_ms + b.optimizer_ms + b.other_ms,
              b.step_ms, 1e-9);
  EXPECT_GE(b.other_ms, 2.0 - kSlack);
  EXPECT_EQ(b.gpu_idle_ms, 0.0);  // no GPU timeline on the CPU
  // The window restarts: nothing left over.
  EXPECT_EQ(timer.collect().steps, 0);
}

// A step replayed as one CUDA graph: its micro-batches' waits add up before one kForwardBegin,
// the replay is the `graph` phase, and the phases with `other` are still the step.
TEST(StepTimerTest, AGraphedStepIsOneGraphPhaseAndStillSumsToTheStep) {
  using Clock = std::chrono::steady_clock;
  StepTimer timer(c10::Device(c10::kCPU));
  double graph = 0;
  for (int s = 0; s < 2; ++s) {
    timer.step_begin();
    for (int micro = 0; micro < 2; ++micro) timer.add_data_wait(0.003);  // two micro-batches
    busy_for(6);
    timer.mark(StepTimer::Mark::kForwardBegin);
    const auto g0 = Clock::now();
    busy_for(8);
    const auto g1 = Clock::now();
    timer.mark(StepTimer::Mark::kGraphEnd);
    graph += std::chrono::duration<double, std::milli>(g1 - g0).count();
    busy_for(1);
    timer.step_end();
  }
  const StepBreakdown b = timer.collect();
  EXPECT_EQ(b.steps, 2);
  EXPECT_NEAR(b.graph_ms, graph / 2, 0.5);
  EXPECT_GE(b.graph_ms, 8.0);
  EXPECT_NEAR(b.data_wait_ms, 6.0, 1e-9) << "both micro-batches' waits";
  EXPECT_EQ(b.forward_ms + b.backward_ms + b.optimizer_ms, 0.0);
  EXPECT_NEAR(b.data_wait_ms + b.graph_ms + b.other_ms, b.step_ms, 1e-9);
  EXPECT_EQ(b.as_map().count("graph"), 1u);
}

// A 256 MiB host-to-device copy on a side stream that the compute stream has to wait for: the wait
// is attributed to `copy`, not to `gpu_idle`, and the whole copy is reported as copy_total_ms.
TEST(StepTimerTest, CudaCopyTheComputeStreamWaitsForIsCopyTime) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const c10::Device device(c10::kCUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::kCUDA);
  const c10::Stream compute = impl.getStream(device);
  const c10::Stream side = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  const at::Tensor host = at::ones({64 << 20}, at::TensorOptions().pinned_memory(true));
  auto begin = std::make_shared<c10::Event>(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);
  auto end = std::make_shared<c10::Event>(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);

  StepTimer timer(device);
  timer.step_begin();
  timer.mark(StepTimer::Mark::kOptimizerEnd);  // the previous step's end: the gap starts here
  at::Tensor on_device;
  {
    c10::StreamGuard guard(side);
    begin->record(side);
    on_device = host.to(device, /*non_blocking=*/true);
    end->record(side);
  }
  end->block(compute);
  timer.set_copy_events({begin, end});
  timer.mark(StepTimer::Mark::kForwardBegin);
  const at::Tensor sum = on_device.sum();
  timer.mark(StepTimer::Mark::kForwardEnd);
  timer.mark(StepTimer::Mark::kBackwardEnd);
  timer.mark(StepTimer::Mark::kOptimizerEnd);
  timer.step_end();
  const StepBreakdown b = timer.collect();
  EXPECT_EQ(sum.item<float>(), static_cast<float>(64 << 20));
  ASSERT_TRUE(b.has_copies);
  EXPECT_GT(b.copy_total_ms, 1.0);  // 256 MiB at < 100 GB/s
  EXPECT_LE(b.copy_ms, b.copy_total_ms + 1e-3);
  EXPECT_GT(b.copy_ms, 0.8 * b.copy_total_ms);
  EXPECT_LT(b.gpu_idle_ms, b.copy_ms);
  EXPECT_EQ(b.as_map().count("copy"), 1u);
}

// A graphed step waits on the copies of all its micro-batches at one mark: both copies count in
// copy_total_ms, and the exposed parts of both in copy_ms.
TEST(StepTimerTest, CudaCopiesOfSeveralMicroBatchesBeforeOneMarkAddUp) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const c10::Device device(c10::kCUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::kCUDA);
  const c10::Stream compute = impl.getStream(device);
  const c10::Stream side = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  const at::Tensor host = at::ones({32 << 20}, at::TensorOptions().pinned_memory(true));
  StepTimer timer(device);
  timer.step_begin();
  timer.mark(StepTimer::Mark::kOptimizerEnd);
  std::vector<at::Tensor> on_device;
  std::vector<double> alone;
  for (int micro = 0; micro < 2; ++micro) {
    auto begin = std::make_shared<c10::Event>(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);
    auto end = std::make_shared<c10::Event>(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);
    {
      c10::StreamGuard guard(side);
      begin->record(side);
      on_device.push_back(host.to(device, /*non_blocking=*/true));
      end->record(side);
    }
    end->block(compute);
    timer.set_copy_events({begin, end});
    end->synchronize();
    alone.push_back(begin->elapsedTime(*end));
  }
  timer.mark(StepTimer::Mark::kForwardBegin);
  const at::Tensor sum = on_device[0].sum() + on_device[1].sum();
  timer.mark(StepTimer::Mark::kGraphEnd);
  timer.step_end();
  const StepBreakdown b = timer.collect();
  EXPECT_EQ(sum.item<float>(), static_cast<float>(64 << 20));
  ASSERT_TRUE(b.has_copies);
  EXPECT_NEAR(b.copy_total_ms, alone[0] + alone[1], 1e-3);
  EXPECT_LE(b.copy_ms, b.copy_total_ms + 1e-3);
  EXPECT_GT(b.graph_ms, 0.0);
}

// Sleeps of the host between steps while the GPU is idle: the part reported as a data wait is
// data_wait, the rest gpu_idle; the phases are the GPU's and everything sums to the wall time. Then
// the same wait while the GPU is still busy with queued work: hidden, so no data_wait at all.
TEST(StepTimerTest, CudaGapsAreDataWaitOrIdleAndEverythingSumsToTheWallTime) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const c10::Device device(c10::kCUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::kCUDA);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(device));
  auto gpu_work = [&](int matmuls) {
    at::Tensor x = a;
    for (int i = 0; i < matmuls; ++i) x = at::mm(x, a).div_(64.0);
    return x;
  };
  auto sleep_ms = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  auto sum_of_phases = [](const StepBreakdown& b) {
    return b.data_wait_ms + b.copy_ms + b.gpu_idle_ms + b.forward_ms + b.backward_ms +
           b.optimizer_ms;
  };
  gpu_work(2);
  impl.synchronizeDevice(0);

  StepTimer timer(device);
  for (int s = 0; s < 3; ++s) {
    timer.step_begin();
    impl.synchronizeDevice(0);  // the GPU is idle from here on until the forward
    sleep_ms(5);
    timer.add_data_wait(0.005);
    sleep_ms(3);  // host work that is not a data wait (prepare_batch, launches)
    timer.mark(StepTimer::Mark::kForwardBegin);
    gpu_work(3);
    timer.mark(StepTimer::Mark::kForwardEnd);
    gpu_work(3);
    timer.mark(StepTimer::Mark::kBackwardEnd);
    gpu_work(1);
    timer.mark(StepTimer::Mark::kOptimizerEnd);
    timer.step_end();
  }
  const StepBreakdown idle = timer.collect();
  EXPECT_EQ(idle.steps, 3);
  EXPECT_NEAR(idle.data_wait_ms, 5.0, 1e-6);  // all of it: the gap was longer than the wait
  EXPECT_GT(idle.gpu_idle_ms, 2.9);
  EXPECT_LT(idle.gpu_idle_ms, 6.0);  // the 3 ms plus sync and launch latency
  EXPECT_GT(idle.forward_ms, 0.5);
  EXPECT_GT(idle.backward_ms, 0.5);
  EXPECT_LE(sum_of_phases(idle), idle.step_ms + 0.1);
  EXPECT_LT(idle.other_ms, 1.0);
  EXPECT_NEAR(sum_of_phases(idle) + idle.other_ms, idle.step_ms, 0.1);

  for (int s = 0; s < 3; ++s) {
    timer.step_begin();
    if (s == 0) {
      timer.mark(StepTimer::Mark::kForwardBegin);
      gpu_work(60);  // tens of ms of queued work
      timer.mark(StepTimer::Mark::kForwardEnd);
      timer.mark(StepTimer::Mark::kBackwardEnd);
      timer.mark(StepTimer::Mark::kOptimizerEnd);
      timer.step_end();
      continue;
    }
    sleep_ms(2);  // the GPU is still busy with the 60 matmuls
    timer.add_data_wait(0.002);
    timer.mark(StepTimer::Mark::kForwardBegin);
    timer.mark(StepTimer::Mark::kForwardEnd);
    timer.mark(StepTimer::Mark::kBackwardEnd);
    timer.mark(StepTimer::Mark::kOptimizerEnd);
    timer.step_end();
  }
  const StepBreakdown hidden = timer.collect();
  EXPECT_LT(hidden.data_wait_ms, 0.05);
  EXPECT_LT(hidden.gpu_idle_ms, 0.05);
  EXPECT_GT(hidden.forward_ms * 3, 10.0);
  EXPECT_NEAR(sum_of_phases(hidden) + hidden.other_ms, hidden.step_ms, 0.1);
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
  EXPECT_EQ(text.str().find("[memory]"), std::string::npos);  // allocations only when asked
  std::filesystem::remove(path);
}

// scripts/memory_peak.py's report on a CPU trace (output and error together); removes the trace.
std::string memory_peak_of(const std::filesystem::path& trace, int* status) {
  const std::string out =
      test::run_source_script("scripts/memory_peak.py", "--device cpu " + trace.string(), status);
  std::filesystem::remove(trace);
  return out;
}

TEST(TraceRecorderTest, AllocationsInTheTraceReplayToWhatIsAliveAtThePeak) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("brrr_memtrace_" + std::to_string(::getpid()) + ".json");
  {
    TraceRecorder recorder(path.string(), c10::Device(c10::kCPU), /*memory=*/true);
    const at::Tensor kept = at::empty({3 << 20}, at::kByte);          // alive to the end
    const at::Tensor summed = at::ones({1 << 18}, at::kFloat).sum();  // 1 MiB, freed at once
    at::Tensor freed = at::empty({5 << 20}, at::kByte);               // alive at the peak only
    freed.reset();
    const at::Tensor late = at::empty({7 << 19}, at::kByte);  // 3.5 MiB: after the peak
    (void)kept, (void)summed, (void)late;
    recorder.stop();
  }
  int status = 0;
  const std::string out = memory_peak_of(path, &status);
  ASSERT_EQ(status, 0) << out;
  // At the peak: the 3 MiB and 5 MiB blocks and the 4-byte sum; the 1 MiB of ones was freed by
  // then and the 3.5 MiB block came after.
  EXPECT_NE(out.find("peak 8.0 MiB"), std::string::npos) << out;
  EXPECT_NE(out.find(" 2  5,242,880, 3,145,728  <-  aten::empty\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" 1  4  <-  aten::sum"), std::string::npos) << out;
  EXPECT_EQ(out.find("1,048,576"), std::string::npos) << out;
  EXPECT_EQ(out.find("3,670,016"), std::string::npos) << out;
}

TEST(TraceRecorderTest, MemoryPeakNamesATraceWithoutAllocations) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("brrr_nomem_" + std::to_string(::getpid()) + ".json");
  {
    TraceRecorder recorder(path.string(), c10::Device(c10::kCPU));
    (void)at::mm(at::randn({8, 8}), at::randn({8, 8}));
    recorder.stop();
  }
  int status = 0;
  const std::string out = memory_peak_of(path, &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("no [memory] events for device cpu (record it with train.profile.memory: "
                     "true"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace brrr
