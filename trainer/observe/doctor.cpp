#include "trainer/observe/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace brrr {
namespace {

// Rule thresholds (see the list in doctor.h).
constexpr double kDataWaitPct = 10.0;            // % of step time waiting for data
constexpr double kInProcessDataWaitPct = 1.0;    // num_workers 0: any measurable loading cost
constexpr double kLowMemoryPct = 30.0;           // peak GPU memory, % of the device
constexpr double kHostSyncsPerStep = 1.0;        // blocking device-to-host reads per step
constexpr double kCopyWaitPct = 5.0;             // % of step time waiting for the H2D copy
constexpr double kSawtoothMeanPct = 80.0;        // mean utilisation below this ...
constexpr double kSawtoothP10Pct = 10.0;         // ... with a p10 below this: starved
constexpr double kUnderusedMeanPct = 50.0;       // mean utilisation below this, p10 not idle
constexpr double kLaunchBoundMeanPct = 90.0;     // mean utilisation below this ...
constexpr double kLaunchBoundDataWaitPct = 2.0;  // ... with less data wait than this: launches
constexpr int64_t kSuggestedWorkers = 4;         // first step up from num_workers 0

// `key` of `record` (which may be null), or nullopt.
std::optional<double> number_of(const MetricRecord* record, const std::string& key) {
  if (record == nullptr) return std::nullopt;
  auto it = record->values.find(key);
  if (it == record->values.end()) return std::nullopt;
  return it->second;
}

std::optional<bool> summary_bool(const MetricRecord* summary, const std::string& key) {
  if (summary == nullptr) return std::nullopt;
  if (auto it = summary->values.find(key); it != summary->values.end()) return it->second != 0.0;
  if (auto it = summary->text.find(key); it != summary->text.end()) {
    if (it->second == "true" || it->second == "True" || it->second == "1") return true;
    if (it->second == "false" || it->second == "False" || it->second == "0") return false;
  }
  return std::nullopt;
}

std::optional<int64_t> summary_int(const MetricRecord* summary, const std::string& key) {
  if (auto v = number_of(summary, key)) return static_cast<int64_t>(std::llround(*v));
  return std::nullopt;
}

std::string summary_string(const MetricRecord* summary, const std::string& key) {
  if (summary == nullptr) return "";
  auto it = summary->text.find(key);
  return it == summary->text.end() ? "" : it->second;
}

// Mean of `key` over the train records that have it.
std::optional<double> train_mean(const std::vector<const MetricRecord*>& train,
                                 const std::string& key) {
  double sum = 0.0;
  int n = 0;
  for (const MetricRecord* r : train) {
    if (auto it = r->values.find(key); it != r->values.end()) sum += it->second, ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

std::string pct(double v) {
  return fmt::format("{:.0f}%", v);
}

}  // namespace

bool RunStats::is_cuda() const {
  return device.rfind("cuda", 0) == 0;
}

RunStats stats_from_records(const std::vector<MetricRecord>& records) {
  const MetricRecord* summary = nullptr;
  std::vector<const MetricRecord*> train;
  for (const MetricRecord& r : records) {
    if (r.kind == RecordKind::kSummary) summary = &r;
    if (r.kind == RecordKind::kTrain) train.push_back(&r);
  }
  RunStats s;
  s.device = summary_string(summary, metric::kDevice);
  s.device_name = summary_string(summary, metric::kDeviceName);
  s.precision = summary_string(summary, metric::kPrecision);
  const MetricRecord* last_train = train.empty() ? nullptr : train.back();
  auto last = [&](const std::string& key) {  // the summary's value, else the last train record's
    std::optional<double> v = number_of(summary, key);
    return v ? v : number_of(last_train, key);
  };
  s.steps = static_cast<int64_t>(std::llround(last(metric::kStep).value_or(0.0)));
  s.time_s = last(metric::kTimeS).value_or(0.0);
  auto summary_or_mean = [&](const std::string& key) {
    std::optional<double> v = number_of(summary, key);
    return v ? v : train_mean(train, key);
  };
  s.samples_per_s = summary_or_mean(metric::kSamplesPerS);
  s.tokens_per_s = summary_or_mean(metric::kTokensPerS);
  if (s.tokens_per_s && *s.tokens_per_s <= 0.0) s.tokens_per_s.reset();  // 0 = not an LM run
  s.data_wait_pct = summary_or_mean(metric::kDataWaitPct);
  s.host_syncs_per_step = summary_or_mean(metric::kHostSyncsPerStep);
  const std::optional<double> copy_ms =
      train_mean(train, std::string(metric::kBreakdownPrefix) + "copy");
  const std::optional<double> step_ms = train_mean(train, metric::kStepTimeMs);
  if (copy_ms && step_ms && *step_ms > 0.0) s.copy_wait_pct = 100.0 * *copy_ms / *step_ms;
  for (const MetricRecord* r : train) {
    if (auto it = r->values.find(metric::kMemPeakMib); it != r->values.end()) {
      s.mem_peak_mib = std::max(s.mem_peak_mib.value_or(0.0), it->second);
    }
  }
  s.num_workers = summary_int(summary, metric::kNumWorkers);
  s.pin_memory = summary_bool(summary, metric::kPinMemory);
  s.prefetch_factor = summary_int(summary, metric::kPrefetchFactor);
  s.batch_size = summary_int(summary, metric::kBatchSize);
  s.grad_accum_steps = summary_int(summary, metric::kGradAccumSteps);
  s.tensor_cores = summary_bool(summary, metric::kTensorCores);
  s.gpu_util_mean = number_of(summary, metric::kGpuUtilMean);
  s.gpu_util_p10 = number_of(summary, metric::kGpuUtilP10);
  s.gpu_mem_used_pct = number_of(summary, metric::kGpuMemUsedPct);
  s.cuda_graph = summary_string(summary, metric::kCudaGraph);
  return s;
}

std::vector<Finding> diagnose(const RunStats& s) {
  std::vector<Finding> out;
  const char* waiter = s.is_cuda() ? "the GPU" : "the training step";

  if (s.data_wait_pct && s.num_workers && *s.num_workers == 0 &&
      *s.data_wait_pct >= kInProcessDataWaitPct) {
    out.push_back({"warn",
                   fmt::format("num_workers 0: data is loaded in the training process, and {} "
                               "waited for it {} of the time: set data.num_workers (0 → {})",
                               waiter, pct(*s.data_wait_pct), kSuggestedWorkers),
                   "data.num_workers"});
  } else if (s.data_wait_pct && *s.data_wait_pct >= kDataWaitPct) {
    std::string workers = "raise data.num_workers";
    if (s.num_workers && *s.num_workers > 0) {
      workers += fmt::format(" ({} → {})", *s.num_workers, 2 * *s.num_workers);
    }
    std::string prefetch = "data.prefetch_factor";
    if (s.prefetch_factor) {
      prefetch += fmt::format(" ({} → {})", *s.prefetch_factor, 2 * *s.prefetch_factor);
    }
    out.push_back({"warn",
                   fmt::format("{} waited for data {} of the time: {} or {}", waiter,
                               pct(*s.data_wait_pct), workers, prefetch),
                   "data.num_workers"});
  }

  if (s.is_cuda()) {
    if (s.gpu_util_mean && s.gpu_util_p10 && *s.gpu_util_mean < kSawtoothMeanPct &&
        *s.gpu_util_p10 < kSawtoothP10Pct) {
      out.push_back({"warn",
                     fmt::format("mean GPU utilisation {} with a p10 of {}: the sawtooth of a "
                                 "starved GPU (it idles between steps waiting for the host)",
                                 pct(*s.gpu_util_mean), pct(*s.gpu_util_p10)),
                     "data.num_workers"});
    } else if (s.gpu_util_mean && *s.gpu_util_mean < kUnderusedMeanPct) {
      out.push_back({"info",
                     fmt::format("mean GPU utilisation {} without idle gaps: kernels are too small "
                                 "to fill the GPU (try a larger data.batch_size)",
                                 pct(*s.gpu_util_mean)),
                     "data.batch_size"});
    }
    // Busy but not full, and not for want of data: the host cannot queue kernels as fast as the
    // GPU runs them. One graph launch per step instead of ~1,000 kernel launches fixes that.
    if (s.gpu_util_mean && s.data_wait_pct && *s.gpu_util_mean < kLaunchBoundMeanPct &&
        *s.data_wait_pct < kLaunchBoundDataWaitPct && !s.cuda_graph.empty() &&
        s.cuda_graph != "captured") {
      out.push_back({"info",
                     fmt::format("GPU busy {} of the time while it waited for data {}: the step "
                                 "is bound by the host launching its kernels; capture it with "
                                 "train.cuda_graph: auto (this run: {})",
                                 pct(*s.gpu_util_mean), pct(*s.data_wait_pct), s.cuda_graph),
                     "train.cuda_graph"});
    }
    if (s.host_syncs_per_step && *s.host_syncs_per_step >= kHostSyncsPerStep) {
      out.push_back({"warn",
                     fmt::format("host syncs per step: {:.3g} (loss.item() in training_step?): "
                                 "each one stalls the CPU until the GPU drains its queue",
                                 *s.host_syncs_per_step),
                     ""});
    }
    if (s.pin_memory && !*s.pin_memory) {
      out.push_back({"warn",
                     "data.pin_memory is off on a CUDA run: host-to-device copies are pageable "
                     "(turn on data.pin_memory)",
                     "data.pin_memory"});
    }
    if (s.copy_wait_pct && *s.copy_wait_pct >= kCopyWaitPct) {
      const bool pageable = s.pin_memory && !*s.pin_memory;
      std::string fix = pageable
                            ? "turn on data.pin_memory (a pageable copy cannot overlap compute)"
                            : "raise data.prefetch_factor";
      if (!pageable && s.prefetch_factor) {
        fix += fmt::format(" ({} → {})", *s.prefetch_factor, 2 * *s.prefetch_factor);
      }
      out.push_back({"warn",
                     fmt::format("the GPU waited for host-to-device copies {} of the step: the "
                                 "copy of the next batch is not hidden behind compute; {}",
                                 pct(*s.copy_wait_pct), fix),
                     pageable ? "data.pin_memory" : "data.prefetch_factor"});
    }
    if (s.precision == "fp32" && s.tensor_cores.value_or(false)) {
      std::string name = s.device_name.empty() ? "a GPU" : s.device_name;
      out.push_back({"info",
                     fmt::format("fp32 on {} with tensor cores: try train.precision: bf16", name),
                     "train.precision"});
    }
    if (s.gpu_mem_used_pct && *s.gpu_mem_used_pct < kLowMemoryPct) {
      std::string batch = "a larger data.batch_size";
      if (s.batch_size) batch += fmt::format(" ({} → {})", *s.batch_size, 2 * *s.batch_size);
      std::string accum;
      if (s.grad_accum_steps && *s.grad_accum_steps > 1) {
        accum = fmt::format(" or fewer train.grad_accum_steps ({} → {})", *s.grad_accum_steps,
                            std::max<int64_t>(1, *s.grad_accum_steps / 2));
      }
      out.push_back(
          {"info",
           fmt::format("GPU memory {} used: try {}{}", pct(*s.gpu_mem_used_pct), batch, accum),
           "data.batch_size"});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return a.severity == "warn" && b.severity != "warn";
  });
  return out;
}

}  // namespace brrr
