#include "trainer/observe/metric_record.h"

#include <cmath>
#include <set>

namespace brrr {

const char* to_string(RecordKind kind) {
  switch (kind) {
    case RecordKind::kTrain:
      return "train";
    case RecordKind::kEval:
      return "eval";
    case RecordKind::kSummary:
      return "summary";
  }
  return "train";
}

std::optional<double> MetricRecord::get(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

double MetricRecord::get_or(const std::string& name, double fallback) const {
  return get(name).value_or(fallback);
}

namespace {

// Values written as JSON integers: counters and the summary's integer settings.
bool is_integer_metric(const std::string& name) {
  static const std::set<std::string> kIntegers = {metric::kStep,       metric::kEpoch,
                                                  metric::kNumWorkers, metric::kPrefetchFactor,
                                                  metric::kBatchSize,  metric::kGradAccumSteps};
  return kIntegers.count(name) > 0;
}

}  // namespace

JsonObject to_json(const MetricRecord& record) {
  JsonObject out;
  out.set("kind", to_string(record.kind));
  out.set(metric::kStep, record.step);
  std::map<std::string, JsonObject> nested;
  for (const auto& [name, value] : record.values) {
    if (name == metric::kStep) continue;
    const auto slash = name.find('/');
    if (slash != std::string::npos) {
      nested[name.substr(0, slash)].set(name.substr(slash + 1), value);
    } else if (is_integer_metric(name) && std::isfinite(value)) {
      out.set(name, static_cast<int64_t>(std::llround(value)));
    } else {
      out.set(name, value);
    }
  }
  for (auto& [name, object] : nested) out.set(name, std::move(object));
  for (const auto& [name, value] : record.text) out.set(name, value);
  return out;
}

MetricRecord record_from_json(const JsonRecord& json) {
  MetricRecord r;
  auto kind = json.strings.find("kind");
  if (kind != json.strings.end()) {
    if (kind->second == "eval") r.kind = RecordKind::kEval;
    if (kind->second == "summary") r.kind = RecordKind::kSummary;
  }
  r.values = json.numbers;
  if (auto step = r.get(metric::kStep)) r.step = static_cast<int64_t>(std::llround(*step));
  for (const auto& [name, value] : json.strings) {
    if (name != "kind") r.text[name] = value;
  }
  return r;
}

std::vector<MetricRecord> read_metric_records(const std::string& path) {
  std::vector<MetricRecord> out;
  for (const JsonRecord& json : read_json_lines(path)) out.push_back(record_from_json(json));
  return out;
}

const std::vector<MetricInfo>& metric_table() {
  static const std::vector<MetricInfo> kTable = {
      {metric::kStep, "", "optimizer steps completed"},
      {metric::kEpoch, "", "epoch of the last batch of the window"},
      {metric::kTimeS, "s", "wall time since the run (this process) started"},
      {metric::kLoss, "", "train: mean loss of the window's steps"},
      {metric::kLr, "", "learning rate of the window's last step"},
      {metric::kGradNorm, "",
       "global L2 gradient norm of the window's last step (before clipping)"},
      {metric::kSamplesPerS, "1/s",
       "examples per second of the window (summary: steady-state median)"},
      {metric::kTokensPerS, "1/s", "tokens per second (language models)"},
      {metric::kStepTimeMs, "ms", "wall time of the window per step"},
      {metric::kWindowSteps, "",
       "train: optimizer steps the window averages (fewer than "
       "train.log_every in the first window after a resume)"},
      {metric::kDataWaitPct, "%", "share of the step the device sat idle waiting for data"},
      {metric::kHostDataWaitPct, "%", "share of the step the host waited for the loader"},
      {metric::kHostSyncsPerStep, "", "host-device syncs per step outside logging"},
      {metric::kLossScale, "", "fp16: the loss scale"},
      {metric::kBreakdownPrefix, "ms",
       "per-step phases: data_wait, copy, forward, backward, optimizer, graph, gpu_idle, other"},
      {metric::kCopyOverlappedMs, "ms", "CUDA: the whole side-stream copy per step"},
      {metric::kMemPeakMib, "MiB", "CUDA: allocator peak since the fit began"},
      {metric::kMemTotalMib, "MiB", "CUDA: device memory"},
      {metric::kValLoss, "", "eval: mean loss over the validation examples"},
      {metric::kValAccuracy, "", "eval: share of correct argmax predictions"},
      {metric::kValPpl, "", "eval, language models: exp(val_loss)"},
      {metric::kSamplesPerSOverall, "1/s", "summary: examples over the whole run's time"},
      {metric::kTokensPerSOverall, "1/s", "summary: tokens over the whole run's time"},
      {metric::kNumWorkers, "", "summary: loader processes used"},
      {metric::kPinMemory, "", "summary: 1 when the batch ring was page-locked"},
      {metric::kPrefetchFactor, "", "summary: batches in flight per worker"},
      {metric::kBatchSize, "", "summary: micro-batch size"},
      {metric::kGradAccumSteps, "", "summary: micro-batches per step"},
      {metric::kTensorCores, "", "summary: 1 when the GPU has tensor cores"},
      {metric::kGpuUtilMean, "%", "summary: NVML utilisation, steady-state mean"},
      {metric::kGpuUtilP10, "%", "summary: NVML utilisation, steady-state 10th percentile"},
      {metric::kGpuUtilMeanOverall, "%", "summary: NVML utilisation over the whole run"},
      {metric::kGpuUtilP10Overall, "%", "summary: its 10th percentile"},
      {metric::kGpuMemUsedPct, "%", "summary: peak device memory used (NVML)"},
      {metric::kDevice, "", "summary text: cpu, cuda:N"},
      {metric::kDeviceName, "", "summary text: the device's name"},
      {metric::kPrecision, "", "summary text: train.precision"},
      {metric::kCudaGraph, "",
       "summary text: train.cuda_graph's outcome, captured or off: <why the step ran eagerly>"},
  };
  return kTable;
}

}  // namespace brrr
