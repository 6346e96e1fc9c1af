#include "core/gpu_monitor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/test_fs.h"

namespace fs = std::filesystem;

namespace {

brrr::GpuSample make_sample(double t, double util, double mem_used, double power) {
  brrr::GpuSample s;
  s.t_s = t;
  s.util_pct = util;
  s.mem_used_mib = mem_used;
  s.mem_total_mib = 80000.0;
  s.sm_clock_mhz = 1980.0;
  s.power_w = power;
  return s;
}

fs::path temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("brrr_gpu_monitor_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  fs::remove(p);
  return p;
}

}  // namespace

TEST(GpuMonitorTest, SummarisesInjectedSamples) {
  // Utilisation 0, 10, ..., 100 in shuffled order: mean 50, p10 at rank 0.1 * 10 = 1 -> 10.
  std::vector<double> utils = {70, 0, 100, 30, 50, 10, 90, 20, 60, 40, 80};
  std::vector<brrr::GpuSample> samples;
  for (size_t i = 0; i < utils.size(); ++i) {
    samples.push_back(make_sample(0.1 * i, utils[i], 1000.0 * (i == 4 ? 20 : 1), 100.0 + i));
  }
  brrr::GpuSummary s = brrr::summarize_gpu_samples(samples);
  EXPECT_EQ(s.num_samples, 11);
  EXPECT_DOUBLE_EQ(s.util_mean, 50.0);
  EXPECT_DOUBLE_EQ(s.util_p10, 10.0);
  EXPECT_DOUBLE_EQ(s.mem_used_max_mib, 20000.0);
  EXPECT_DOUBLE_EQ(s.mem_total_mib, 80000.0);
  EXPECT_DOUBLE_EQ(s.mem_used_pct, 25.0);
  EXPECT_DOUBLE_EQ(s.power_mean_w, 105.0);  // mean of 100..110
}

TEST(GpuMonitorTest, InterpolatesP10BetweenSamples) {
  // Sawtooth of a starved GPU: two idle samples, three busy. Sorted 0,0,100,100,100;
  // rank 0.1 * 4 = 0.4 lies between two zeros -> p10 0; mean 60.
  std::vector<brrr::GpuSample> saw = {make_sample(0, 100, 1, 1), make_sample(1, 0, 1, 1),
                                      make_sample(2, 100, 1, 1), make_sample(3, 0, 1, 1),
                                      make_sample(4, 100, 1, 1)};
  brrr::GpuSummary s = brrr::summarize_gpu_samples(saw);
  EXPECT_DOUBLE_EQ(s.util_mean, 60.0);
  EXPECT_DOUBLE_EQ(s.util_p10, 0.0);
  // Two samples 20 and 70: rank 0.1 -> 20 + 0.1 * 50 = 25.
  brrr::GpuSummary two =
      brrr::summarize_gpu_samples({make_sample(0, 70, 1, 1), make_sample(1, 20, 1, 1)});
  EXPECT_DOUBLE_EQ(two.util_p10, 25.0);
}

TEST(GpuMonitorTest, EmptySamplesGiveEmptySummary) {
  brrr::GpuSummary s = brrr::summarize_gpu_samples({});
  EXPECT_EQ(s.num_samples, 0);
  EXPECT_EQ(s.util_mean, 0.0);
  EXPECT_EQ(s.mem_used_pct, 0.0);
}

TEST(GpuMonitorTest, SampleJsonCarriesEveryField) {
  std::string line = brrr::gpu_sample_json(make_sample(0.05, 97, 30000, 450.5));
  EXPECT_EQ(line,
            "{\"t_s\": 0.05, \"util_pct\": 97, \"mem_used_mib\": 30000, \"mem_total_mib\": 80000, "
            "\"sm_clock_mhz\": 1980, \"power_w\": 450.5}");
}

TEST(GpuMonitorTest, MapsCudaIndexThroughPlainVisibleDeviceList) {
  EXPECT_EQ(brrr::nvml_index_for_cuda_device(1, nullptr), 1);
  EXPECT_EQ(brrr::nvml_index_for_cuda_device(0, "2,3"), 2);
  EXPECT_EQ(brrr::nvml_index_for_cuda_device(1, " 5 , 7"), 7);
  // UUIDs and MIG ids cannot be mapped without more NVML calls: the CUDA index is kept.
  EXPECT_EQ(brrr::nvml_index_for_cuda_device(1, "GPU-8d2c0a4e,GPU-11aa"), 1);
  EXPECT_THROW(brrr::nvml_index_for_cuda_device(2, "0,1"), brrr::Error);
}

TEST(GpuMonitorTest, RejectsIntervalOutOfRange) {
  EXPECT_THROW(brrr::GpuMonitor(0, "unused.jsonl", 0), brrr::Error);
  EXPECT_THROW(brrr::GpuMonitor(0, "unused.jsonl", 20000), brrr::Error);
}

TEST(GpuMonitorTest, IsHarmlessWithoutNvml) {
  fs::path path = temp_path("none.jsonl");
  brrr::GpuMonitor monitor(0, path.string(), 50);
  if (monitor.available()) {
    brrr::test::remove_tree(path.parent_path());
    GTEST_SKIP() << "NVML present: covered by SamplesTheRealGpu";
  }
  EXPECT_EQ(monitor.device_name(), "");
  monitor.start();
  EXPECT_FALSE(monitor.running());
  monitor.stop();
  monitor.stop();
  EXPECT_EQ(monitor.summary().num_samples, 0);
  EXPECT_FALSE(fs::exists(path));
  if (!HasFailure()) brrr::test::remove_tree(path.parent_path());
}

TEST(GpuMonitorTest, SamplesTheRealGpu) {
  fs::path path = temp_path("gpu.jsonl");
  auto t0 = std::chrono::steady_clock::now();
  brrr::GpuMonitor monitor(0, path.string(), 50, t0);
  if (!monitor.available()) {
    brrr::test::remove_tree(path.parent_path());
    GTEST_SKIP() << "no NVML / NVIDIA driver on this machine";
  }
  EXPECT_FALSE(monitor.device_name().empty());
  monitor.start();
  EXPECT_TRUE(monitor.running());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  monitor.stop();
  EXPECT_FALSE(monitor.running());
  std::vector<brrr::GpuSample> samples = monitor.samples();
  ASSERT_GE(samples.size(), 4u);  // 400 ms at 50 ms, with slack for a loaded machine
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_GE(samples[i].util_pct, 0.0);
    EXPECT_LE(samples[i].util_pct, 100.0);
    EXPECT_GT(samples[i].mem_total_mib, 0.0);
    EXPECT_LE(samples[i].mem_used_mib, samples[i].mem_total_mib);
    if (i > 0) {
      EXPECT_GT(samples[i].t_s, samples[i - 1].t_s);
    }
  }
  std::ifstream in(path);
  std::string line;
  size_t lines = 0;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.rfind("{\"t_s\": ", 0), 0u) << line;
    ++lines;
  }
  EXPECT_EQ(lines, samples.size());
  EXPECT_EQ(monitor.summary().num_samples, static_cast<int64_t>(samples.size()));
  if (!HasFailure()) brrr::test::remove_tree(path.parent_path());
}
