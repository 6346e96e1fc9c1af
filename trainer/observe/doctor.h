#pragma once
// The doctor: reads a finished run's numbers and says what keeps the GPU from being busy, with the
// numbers that show it and the config key to change. Each rule has one threshold (doctor.cpp,
// kThreshold constants); a run inside every threshold gets no finding at all.
//
// Rules (CUDA-only ones are marked *):
//  - data wait >= 10% of step time (num_workers > 0): raise data.num_workers / data.prefetch_factor
//  - num_workers 0 and data wait >= 1%: data is loaded in the training process
//  - * pin_memory off: pageable host-to-device copies
//  - * the compute stream waited for host-to-device copies >= 5% of the step: not hidden
//  - * fp32 on a GPU with tensor cores: train.precision bf16
//  - * peak GPU memory < 30% of the device: larger data.batch_size / fewer grad_accum_steps
//  - * >= 1 host sync per step: something reads GPU values every step
//  - * mean utilisation < 80% with p10 < 10%: the sawtooth of a starved GPU
//  - * mean utilisation < 50% with p10 >= 10%: a GPU underused by small kernels
//  - * mean utilisation < 90% with data wait < 2% and the step not captured in a CUDA graph: the
//    host's kernel launches bound the step; train.cuda_graph
// Unknown numbers (std::nullopt: not recorded) never trigger a rule.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/observe/metric_record.h"

namespace brrr {

/// One diagnosis.
struct Finding {
  /// "warn" (costs throughput now) or "info" (a likely gain).
  std::string severity;
  /// Complete sentence with the measured numbers and the suggested change.
  std::string message;
  /// The config key to change ("data.num_workers"), or "" when the fix is in code.
  std::string config_key;
};

/// What the doctor looks at, from a run's metric records (summary first, train records as fallback)
/// and, when the summary lacks them, the GPU monitor's numbers.
struct RunStats {
  /// "cuda:0", "cpu", or "" when unknown.
  std::string device;
  std::string device_name;
  /// "fp32", "tf32", "bf16", "fp16", or "".
  std::string precision;
  int64_t steps = 0;
  double time_s = 0.0;
  std::optional<double> samples_per_s;
  std::optional<double> tokens_per_s;
  /// Percent of step time spent waiting for the next batch.
  std::optional<double> data_wait_pct;
  std::optional<double> host_syncs_per_step;
  /// Percent of step time the compute stream waited for the batch's host-to-device copy
  /// (breakdown_ms/copy over step_time_ms, means of the train records).
  std::optional<double> copy_wait_pct;
  /// Largest mem_peak_mib of the train records (allocator peak), MiB.
  std::optional<double> mem_peak_mib;
  std::optional<int64_t> num_workers;
  std::optional<bool> pin_memory;
  std::optional<int64_t> prefetch_factor;
  std::optional<int64_t> batch_size;
  std::optional<int64_t> grad_accum_steps;
  std::optional<bool> tensor_cores;
  /// GPU monitor: mean and 10th percentile of utilisation, peak memory as % of the device.
  std::optional<double> gpu_util_mean;
  std::optional<double> gpu_util_p10;
  std::optional<double> gpu_mem_used_pct;
  /// train.cuda_graph's outcome ("captured", "off: <why>"), or "" when not recorded.
  std::string cuda_graph;

  /// True when device names a CUDA device.
  bool is_cuda() const;
};

/// Builds RunStats from a run's records (in memory, or read_metric_records of metrics.jsonl; any
/// order; the last summary record wins, train records fill what it lacks). Booleans may be
/// recorded as numbers (0/1) or strings.
RunStats stats_from_records(const std::vector<MetricRecord>& records);

/// Applies every rule; findings come "warn" first. A healthy run gives an empty vector.
std::vector<Finding> diagnose(const RunStats& stats);

}  // namespace brrr
