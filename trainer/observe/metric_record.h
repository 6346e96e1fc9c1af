#pragma once
// Typed metric records: what the trainer measures, kept in memory for the run and written by the
// writers (metrics.jsonl, TensorBoard), read by the progress line, the summary, the doctor and
// `trainer report`. Every metric name lives in the table of metric_record.cpp (metric_table()),
// and code names them through the constants in `brrr::metric`, so a writer, the doctor and the
// report cannot disagree on a spelling.
//
// A record's values are numbers; names with a '/' ("breakdown_ms/forward") are one group and are
// written as a nested JSON object ({"breakdown_ms": {"forward": ...}}). `text` holds the few
// string values of a summary (device name, precision).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json_lines.h"

namespace brrr {

/// What a record describes.
enum class RecordKind {
  kTrain,    ///< one logging window of training steps
  kEval,     ///< one evaluation
  kSummary,  ///< the end of a run
};

/// "train", "eval", "summary" (the `kind` field of metrics.jsonl).
const char* to_string(RecordKind kind);

struct MetricRecord {
  RecordKind kind = RecordKind::kTrain;
  /// Optimizer steps completed when the record was made.
  int64_t step = 0;
  /// Metric name -> value (names from brrr::metric, or a user's own).
  std::map<std::string, double> values;
  /// String values (summary only: device, device_name, precision).
  std::map<std::string, std::string> text;

  /// The value of `name`, or nullopt when not recorded.
  std::optional<double> get(const std::string& name) const;
  /// The value of `name`, or `fallback`.
  double get_or(const std::string& name, double fallback) const;
  bool has(const std::string& name) const { return values.count(name) > 0; }
};

/// One line of metrics.jsonl: {"kind": ..., "step": ..., values..., text...}; "a/b" names become
/// nested objects; counters (step, epoch, the summary's integer settings) print as integers.
JsonObject to_json(const MetricRecord& record);

/// The record a metrics.jsonl line holds (the inverse of to_json; unknown kinds are kTrain).
MetricRecord record_from_json(const JsonRecord& json);

/// Every record of a metrics.jsonl file, in file order (DataError naming path:line if malformed).
std::vector<MetricRecord> read_metric_records(const std::string& path);

/// One metric's documentation (the README's and `--help-config`'s list of what is recorded).
struct MetricInfo {
  const char* name;
  const char* unit;
  const char* doc;
};
/// Every metric brrr records, in the order they are documented.
const std::vector<MetricInfo>& metric_table();

/// The names of the metric table.
namespace metric {
inline constexpr const char kStep[] = "step";
inline constexpr const char kEpoch[] = "epoch";
inline constexpr const char kTimeS[] = "time_s";
inline constexpr const char kLoss[] = "loss";
inline constexpr const char kLr[] = "lr";
inline constexpr const char kGradNorm[] = "grad_norm";
inline constexpr const char kSamplesPerS[] = "samples_per_s";
inline constexpr const char kTokensPerS[] = "tokens_per_s";
inline constexpr const char kStepTimeMs[] = "step_time_ms";
inline constexpr const char kWindowSteps[] = "window_steps";
inline constexpr const char kDataWaitPct[] = "data_wait_pct";
inline constexpr const char kHostDataWaitPct[] = "host_data_wait_pct";
inline constexpr const char kHostSyncsPerStep[] = "host_syncs_per_step";
inline constexpr const char kLossScale[] = "loss_scale";
inline constexpr const char kBreakdownPrefix[] = "breakdown_ms/";
inline constexpr const char kCopyOverlappedMs[] = "copy_overlapped_ms";
inline constexpr const char kMemPeakMib[] = "mem_peak_mib";
inline constexpr const char kMemTotalMib[] = "mem_total_mib";
// data-parallel: c10d's Reducer timings of backward (running means over its sampled steps)
inline constexpr const char kCommPrefix[] = "comm_ms/";
// eval
inline constexpr const char kValLoss[] = "val_loss";
inline constexpr const char kValAccuracy[] = "val_accuracy";
inline constexpr const char kValPpl[] = "val_ppl";
// summary
inline constexpr const char kSamplesPerSOverall[] = "samples_per_s_overall";
inline constexpr const char kTokensPerSOverall[] = "tokens_per_s_overall";
inline constexpr const char kNumWorkers[] = "num_workers";
inline constexpr const char kPinMemory[] = "pin_memory";
inline constexpr const char kPrefetchFactor[] = "prefetch_factor";
inline constexpr const char kBatchSize[] = "batch_size";
inline constexpr const char kGradAccumSteps[] = "grad_accum_steps";
inline constexpr const char kTensorCores[] = "tensor_cores";
inline constexpr const char kGpuUtilMean[] = "gpu_util_mean";
inline constexpr const char kGpuUtilP10[] = "gpu_util_p10";
inline constexpr const char kGpuUtilMeanOverall[] = "gpu_util_mean_overall";
inline constexpr const char kGpuUtilP10Overall[] = "gpu_util_p10_overall";
inline constexpr const char kGpuMemUsedPct[] = "gpu_mem_used_pct";
// summary text
inline constexpr const char kDevice[] = "device";
inline constexpr const char kDeviceName[] = "device_name";
inline constexpr const char kPrecision[] = "precision";
inline constexpr const char kCudaGraph[] = "cuda_graph";
}  // namespace metric

}  // namespace brrr
