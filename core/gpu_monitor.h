#pragma once
// GPU utilisation monitor: a background thread samples NVML every interval_ms and appends one
// JSON line per sample to gpu.jsonl, keeping the samples for an end-of-run summary.
//
// NVML is loaded at run time (dlopen "libnvidia-ml.so.1"); nothing links against it, so on a
// machine without an NVIDIA driver the monitor is simply unavailable (available() == false) and
// start()/stop() do nothing.
//
// Device numbering: the constructor takes a CUDA device index. NVML numbers every GPU of the host
// in PCI bus order and ignores CUDA_VISIBLE_DEVICES, so when CUDA_VISIBLE_DEVICES is a plain list
// of indices ("2,3") CUDA device i is NVML device list[i]. When it holds UUIDs or MIG ids the
// mapping is unknown and the CUDA index is used as is (a debug line says so). CUDA's default
// CUDA_DEVICE_ORDER (FASTEST_FIRST) matches PCI order on hosts of identical GPUs.
//
// Thread safety: all public methods may be called from any thread; the sampler thread is the only
// writer of the file while running.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace brrr {

/// One NVML reading.
struct GpuSample {
  /// Seconds since the monitor's time 0 (the trainer's time 0).
  double t_s = 0.0;
  /// Percent of the last sample period in which a kernel ran (NVML "gpu" utilisation).
  double util_pct = 0.0;
  /// Device memory in use / in total, MiB.
  double mem_used_mib = 0.0;
  double mem_total_mib = 0.0;
  /// Current SM clock, MHz.
  double sm_clock_mhz = 0.0;
  /// Board power draw, watts.
  double power_w = 0.0;
};

/// Aggregate of a run's samples.
struct GpuSummary {
  int64_t num_samples = 0;
  /// Mean and 10th percentile (linear interpolation between order statistics, as numpy/torch) of
  /// util_pct. A low p10 with a high mean is the sawtooth of a GPU that is starved between steps.
  double util_mean = 0.0;
  double util_p10 = 0.0;
  /// Largest mem_used_mib seen, the matching total, and their ratio in percent.
  double mem_used_max_mib = 0.0;
  double mem_total_mib = 0.0;
  double mem_used_pct = 0.0;
  double power_mean_w = 0.0;
};

/// Summarises samples (an empty vector gives a summary with num_samples == 0 and zeros).
GpuSummary summarize_gpu_samples(const std::vector<GpuSample>& samples);

/// The gpu.jsonl line of a sample (no trailing newline), e.g.
/// {"t_s": 0.050, "util_pct": 97, "mem_used_mib": 30000, ...}.
std::string gpu_sample_json(const GpuSample& sample);

/// NVML index of CUDA device `cuda_index` given the value of CUDA_VISIBLE_DEVICES (nullptr when
/// unset). Returns cuda_index itself when the variable is unset or is not a plain index list;
/// throws brrr::Error when the list is plain but shorter than cuda_index + 1.
int nvml_index_for_cuda_device(int cuda_index, const char* cuda_visible_devices);

namespace detail {
struct NvmlLibrary;
}

/// Background NVML sampler of one GPU.
class GpuMonitor {
 public:
  static constexpr int kDefaultIntervalMs = 100;

  /// Loads NVML and opens the device (see the header comment for index mapping). Never throws for
  /// a missing driver or device: available() is then false. Throws brrr::Error when interval_ms is
  /// outside [10, 10000].
  GpuMonitor(int device_index, std::string jsonl_path, int interval_ms = kDefaultIntervalMs,
             std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now());
  /// Stops the sampler (if running) and unloads NVML.
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  /// True when NVML was loaded and the device opened.
  bool available() const { return device_ != nullptr; }
  /// NVML's product name ("NVIDIA H200"), or "" when unavailable.
  const std::string& device_name() const { return device_name_; }

  /// Starts the sampler thread (truncating the jsonl file). No-op when unavailable or running.
  /// Throws brrr::Error when the jsonl file cannot be opened.
  void start();
  /// Stops and joins the sampler thread, flushing the file. No-op when not running.
  void stop();
  bool running() const;

  /// Summary of the samples taken so far (callable while running).
  GpuSummary summary() const;
  /// Copy of the samples taken so far.
  std::vector<GpuSample> samples() const;

 private:
  void sample_loop();
  std::optional<GpuSample> read_sample() const;

  std::string jsonl_path_;
  int interval_ms_;
  std::chrono::steady_clock::time_point t0_;
  const detail::NvmlLibrary* nvml_ = nullptr;  // process-wide, never unloaded
  void* device_ = nullptr;                     // nvmlDevice_t; null when unavailable
  std::string device_name_;

  mutable std::mutex mutex_;  // guards samples_, stop_requested_, thread_
  std::condition_variable wake_;
  bool stop_requested_ = false;
  std::vector<GpuSample> samples_;
  std::thread thread_;
};

}  // namespace brrr
