#include "trainer/observe/doctor.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace {

// A busy bf16 CUDA run: inside every threshold.
brrr::RunStats healthy() {
  brrr::RunStats s;
  s.device = "cuda:0";
  s.device_name = "NVIDIA H200";
  s.precision = "bf16";
  s.steps = 1000;
  s.time_s = 130.0;
  s.samples_per_s = 5120.0;
  s.data_wait_pct = 2.0;
  s.host_syncs_per_step = 0.0;
  s.num_workers = 8;
  s.pin_memory = true;
  s.prefetch_factor = 2;
  s.batch_size = 256;
  s.grad_accum_steps = 1;
  s.tensor_cores = true;
  s.gpu_util_mean = 93.0;
  s.gpu_util_p10 = 80.0;
  s.gpu_mem_used_pct = 40.0;
  return s;
}

// The one finding of `s` (the test fails when there is not exactly one).
brrr::Finding only_finding(const brrr::RunStats& s) {
  std::vector<brrr::Finding> f = brrr::diagnose(s);
  EXPECT_EQ(f.size(), 1u);
  for (size_t i = 1; i < f.size(); ++i) ADD_FAILURE() << "extra finding: " << f[i].message;
  return f.empty() ? brrr::Finding{} : f[0];
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

brrr::MetricRecord record(const std::string& kind, std::map<std::string, double> numbers) {
  brrr::JsonRecord json;
  json.strings["kind"] = kind;
  json.numbers = std::move(numbers);
  return brrr::record_from_json(json);
}

}  // namespace

TEST(DoctorTest, HealthyRunHasNoFindings) {
  EXPECT_TRUE(brrr::diagnose(healthy()).empty());
  brrr::RunStats cpu;  // nothing recorded: no rule may guess
  cpu.device = "cpu";
  EXPECT_TRUE(brrr::diagnose(cpu).empty());
}

TEST(DoctorTest, DataWaitSuggestsMoreWorkersWithNumbers) {
  brrr::RunStats s = healthy();
  s.data_wait_pct = 41.0;
  s.num_workers = 4;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.severity, "warn");
  EXPECT_EQ(f.config_key, "data.num_workers");
  EXPECT_TRUE(contains(f.message, "the GPU waited for data 41% of the time")) << f.message;
  EXPECT_TRUE(contains(f.message, "data.num_workers (4 → 8)")) << f.message;
  EXPECT_TRUE(contains(f.message, "data.prefetch_factor (2 → 4)")) << f.message;
  s.data_wait_pct = 9.9;  // just under the threshold
  EXPECT_TRUE(brrr::diagnose(s).empty());
  s.data_wait_pct = 10.0;
  EXPECT_EQ(brrr::diagnose(s).size(), 1u);
}

TEST(DoctorTest, InProcessLoadingIsFlaggedWhenItCostsTime) {
  brrr::RunStats s = healthy();
  s.num_workers = 0;
  s.data_wait_pct = 5.0;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.config_key, "data.num_workers");
  EXPECT_TRUE(contains(f.message, "num_workers 0: data is loaded in the training process"));
  EXPECT_TRUE(contains(f.message, "5%"));
  s.data_wait_pct = 0.5;  // an in-memory dataset: loading costs nothing measurable
  EXPECT_TRUE(brrr::diagnose(s).empty());
}

TEST(DoctorTest, PinMemoryOffOnlyMattersOnCuda) {
  brrr::RunStats s = healthy();
  s.pin_memory = false;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.config_key, "data.pin_memory");
  EXPECT_TRUE(contains(f.message, "pageable"));
  s.device = "cpu";
  s.gpu_util_mean.reset();
  s.gpu_util_p10.reset();
  s.gpu_mem_used_pct.reset();
  EXPECT_TRUE(brrr::diagnose(s).empty());
}

TEST(DoctorTest, ExposedCopyTimeSuggestsPinnedMemoryOrMorePrefetch) {
  brrr::RunStats s = healthy();
  s.copy_wait_pct = 12.0;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.config_key, "data.prefetch_factor");
  EXPECT_TRUE(contains(f.message, "host-to-device copies 12% of the step")) << f.message;
  s.copy_wait_pct = 4.0;  // under the threshold: hidden enough
  EXPECT_TRUE(brrr::diagnose(s).empty());
  s.copy_wait_pct = 30.0;
  s.pin_memory = false;
  bool named_pinning = false;
  for (const auto& finding : brrr::diagnose(s)) {
    if (contains(finding.message, "copies 30%")) {
      named_pinning = finding.config_key == "data.pin_memory";
    }
  }
  EXPECT_TRUE(named_pinning);
}

TEST(DoctorTest, CopyWaitComesFromTheBreakdownOfTrainRecords) {
  std::vector<brrr::MetricRecord> records(2);
  for (auto& r : records) {
    r.kind = brrr::RecordKind::kTrain;
    r.values["step_time_ms"] = 20.0;
  }
  records[0].values["breakdown_ms/copy"] = 1.0;
  records[1].values["breakdown_ms/copy"] = 3.0;
  EXPECT_DOUBLE_EQ(brrr::stats_from_records(records).copy_wait_pct.value(), 10.0);
  records[0].values.erase("breakdown_ms/copy");
  records[1].values.erase("breakdown_ms/copy");
  EXPECT_FALSE(brrr::stats_from_records(records).copy_wait_pct.has_value()) << "CPU runs have none";
}

TEST(DoctorTest, Fp32OnTensorCoresSuggestsBf16) {
  brrr::RunStats s = healthy();
  s.precision = "fp32";
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.severity, "info");
  EXPECT_EQ(f.config_key, "train.precision");
  EXPECT_TRUE(contains(f.message, "fp32 on NVIDIA H200 with tensor cores"));
  EXPECT_TRUE(contains(f.message, "train.precision: bf16"));
  s.tensor_cores = false;
  EXPECT_TRUE(brrr::diagnose(s).empty());
  s.tensor_cores = true;
  s.precision = "tf32";
  EXPECT_TRUE(brrr::diagnose(s).empty());
}

TEST(DoctorTest, LowGpuMemorySuggestsLargerBatch) {
  brrr::RunStats s = healthy();
  s.gpu_mem_used_pct = 23.0;
  s.batch_size = 64;
  s.grad_accum_steps = 4;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.config_key, "data.batch_size");
  EXPECT_TRUE(contains(f.message, "GPU memory 23% used")) << f.message;
  EXPECT_TRUE(contains(f.message, "data.batch_size (64 → 128)")) << f.message;
  EXPECT_TRUE(contains(f.message, "train.grad_accum_steps (4 → 2)")) << f.message;
  s.gpu_mem_used_pct = 31.0;
  EXPECT_TRUE(brrr::diagnose(s).empty());
}

TEST(DoctorTest, HostSyncsPerStepAreCounted) {
  brrr::RunStats s = healthy();
  s.host_syncs_per_step = 3.0;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.severity, "warn");
  EXPECT_EQ(f.config_key, "");
  EXPECT_TRUE(contains(f.message, "host syncs per step: 3 (loss.item() in training_step?)"))
      << f.message;
  s.host_syncs_per_step = 0.1;  // one sync on every tenth (logging) step is fine
  EXPECT_TRUE(brrr::diagnose(s).empty());
}

TEST(DoctorTest, SawtoothUtilisationIsNamed) {
  brrr::RunStats s = healthy();
  s.gpu_util_mean = 45.0;
  s.gpu_util_p10 = 0.0;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.severity, "warn");
  EXPECT_TRUE(contains(f.message, "mean GPU utilisation 45% with a p10 of 0%")) << f.message;
  EXPECT_TRUE(contains(f.message, "sawtooth of a starved GPU"));
}

TEST(DoctorTest, FlatLowUtilisationIsUnderuseNotStarvation) {
  brrr::RunStats s = healthy();
  s.gpu_util_mean = 40.0;
  s.gpu_util_p10 = 30.0;
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.severity, "info");
  EXPECT_EQ(f.config_key, "data.batch_size");
  EXPECT_FALSE(contains(f.message, "sawtooth"));
}

TEST(DoctorTest, ABusyButNotFullGpuWithoutDataWaitSuggestsTheCudaGraph) {
  brrr::RunStats s = healthy();
  s.gpu_util_mean = 81.0;
  s.gpu_util_p10 = 74.0;
  s.data_wait_pct = 0.4;
  s.cuda_graph = "off: train.cuda_graph is false";
  brrr::Finding f = only_finding(s);
  EXPECT_EQ(f.severity, "info");
  EXPECT_EQ(f.config_key, "train.cuda_graph");
  EXPECT_TRUE(contains(f.message, "GPU busy 81% of the time while it waited for data 0%"))
      << f.message;
  EXPECT_TRUE(contains(f.message, "(this run: off: train.cuda_graph is false)")) << f.message;

  s.cuda_graph = "captured";  // already graphed: something else bounds it
  EXPECT_TRUE(brrr::diagnose(s).empty());
  s.cuda_graph = "";  // not recorded (an older run): no guess
  EXPECT_TRUE(brrr::diagnose(s).empty());
  s.cuda_graph = "off: train.cuda_graph is false";
  s.data_wait_pct = 6.0;  // waiting for data is a loader problem, not a launch one
  EXPECT_TRUE(brrr::diagnose(s).empty());
}

TEST(DoctorTest, PutsWarningsBeforeHints) {
  brrr::RunStats s = healthy();
  s.precision = "fp32";     // info
  s.pin_memory = false;     // warn
  s.gpu_mem_used_pct = 10;  // info
  s.data_wait_pct = 50.0;   // warn
  std::vector<brrr::Finding> f = brrr::diagnose(s);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].severity, "warn");
  EXPECT_EQ(f[1].severity, "warn");
  EXPECT_EQ(f[2].severity, "info");
  EXPECT_EQ(f[3].severity, "info");
}

TEST(DoctorTest, StatsComeFromTheSummaryRecord) {
  brrr::MetricRecord summary = record("summary", {{"step", 1000},
                                                  {"time_s", 130},
                                                  {"samples_per_s", 5120},
                                                  {"data_wait_pct", 3.5},
                                                  {"num_workers", 4},
                                                  {"pin_memory", 0},
                                                  {"batch_size", 64},
                                                  {"gpu_util_mean", 93},
                                                  {"gpu_util_p10", 80}});
  summary.text["device"] = "cuda:0";
  summary.text["precision"] = "bf16";
  summary.text["tensor_cores"] = "true";
  summary.text["cuda_graph"] = "captured";
  std::vector<brrr::MetricRecord> records = {
      record("train", {{"step", 10}, {"samples_per_s", 100}, {"mem_peak_mib", 2048}}),
      record("eval", {{"step", 10}, {"val_loss", 0.3}}),
      record("train", {{"step", 20}, {"samples_per_s", 200}, {"mem_peak_mib", 4096}}), summary};
  brrr::RunStats s = brrr::stats_from_records(records);
  EXPECT_EQ(s.cuda_graph, "captured");
  EXPECT_TRUE(s.is_cuda());
  EXPECT_EQ(s.precision, "bf16");
  EXPECT_EQ(s.steps, 1000);
  EXPECT_DOUBLE_EQ(s.time_s, 130.0);
  EXPECT_DOUBLE_EQ(s.samples_per_s.value(), 5120.0);  // the summary wins over train records
  EXPECT_DOUBLE_EQ(s.data_wait_pct.value(), 3.5);
  EXPECT_EQ(s.num_workers.value(), 4);
  EXPECT_FALSE(s.pin_memory.value());
  EXPECT_TRUE(s.tensor_cores.value());
  EXPECT_DOUBLE_EQ(s.mem_peak_mib.value(), 4096.0);
  EXPECT_DOUBLE_EQ(s.gpu_util_p10.value(), 80.0);
  EXPECT_FALSE(s.gpu_mem_used_pct.has_value());
  EXPECT_FALSE(s.prefetch_factor.has_value());
}

TEST(DoctorTest, TrainRecordsFillARunWithoutSummary) {
  std::vector<brrr::MetricRecord> records = {
      record("train", {{"step", 10}, {"time_s", 1}, {"samples_per_s", 100}, {"data_wait_pct", 20}}),
      record("train",
             {{"step", 20}, {"time_s", 2}, {"samples_per_s", 300}, {"data_wait_pct", 40}})};
  brrr::RunStats s = brrr::stats_from_records(records);
  EXPECT_EQ(s.steps, 20);
  EXPECT_DOUBLE_EQ(s.time_s, 2.0);
  EXPECT_DOUBLE_EQ(s.samples_per_s.value(), 200.0);
  EXPECT_DOUBLE_EQ(s.data_wait_pct.value(), 30.0);
  EXPECT_FALSE(s.is_cuda());
  EXPECT_FALSE(s.num_workers.has_value());
  // Data wait is known, workers are not: the rule still fires, without made-up numbers.
  std::vector<brrr::Finding> f = brrr::diagnose(s);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(contains(f[0].message, "the training step waited for data 30% of the time"));
  EXPECT_FALSE(contains(f[0].message, "→"));
}
