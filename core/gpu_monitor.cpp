#include "core/gpu_monitor.h"
#include "core/json_lines.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace brrr {
namespace detail {

// The few NVML declarations used here, matching nvml.h (NVML API version 11/12). Declared by hand
// because nothing may link against NVML: it is resolved with dlsym when present.
using nvmlReturn_t = int;  // enum nvmlReturn_enum; NVML_SUCCESS == 0
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of time a kernel was running
  unsigned int memory;  // percent of time device memory was read or written
};
struct nvmlMemory_t {  // bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;                   // nvmlClockType_t NVML_CLOCK_SM
constexpr unsigned int kNvmlNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

struct NvmlLibrary {
  void* handle = nullptr;
  bool initialised = false;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*get_handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*get_clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*get_power)(nvmlDevice_t, unsigned int*) = nullptr;  // milliwatts
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned int) = nullptr;

  // Loads the library and every symbol; false (with a debug line saying why) when any is missing.
  bool load() {
    handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      log::debug("gpu monitor: NVML not loaded ({}); GPU sampling is off", why ? why : "?");
      return false;
    }
    bool ok = bind(init, "nvmlInit_v2") && bind(shutdown, "nvmlShutdown") &&
              bind(get_handle_by_index, "nvmlDeviceGetHandleByIndex_v2") &&
              bind(get_utilization, "nvmlDeviceGetUtilizationRates") &&
              bind(get_memory, "nvmlDeviceGetMemoryInfo") &&
              bind(get_clock, "nvmlDeviceGetClockInfo") &&
              bind(get_power, "nvmlDeviceGetPowerUsage") && bind(get_name, "nvmlDeviceGetName");
    if (!ok) return false;
    nvmlReturn_t rc = init();
    if (rc != kNvmlSuccess) {
      log::debug("gpu monitor: nvmlInit_v2 failed with NVML error {}; GPU sampling is off", rc);
      return false;
    }
    initialised = true;
    return true;
  }

 private:
  template <typename Fn>
  bool bind(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(dlsym(handle, name));
    if (fn == nullptr) log::debug("gpu monitor: NVML has no symbol {}; GPU sampling is off", name);
    return fn != nullptr;
  }
};

}  // namespace detail

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Linear interpolation between the order statistics at rank q * (n - 1), as numpy's and torch's
// default quantile. `sorted` is ascending and non-empty.
double quantile_sorted(const std::vector<double>& sorted, double q) {
  double pos = q * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

GpuSummary summarize_gpu_samples(const std::vector<GpuSample>& samples) {
  GpuSummary s;
  s.num_samples = static_cast<int64_t>(samples.size());
  if (samples.empty()) return s;
  std::vector<double> util;
  util.reserve(samples.size());
  double util_sum = 0.0;
  double power_sum = 0.0;
  for (const GpuSample& x : samples) {
    util.push_back(x.util_pct);
    util_sum += x.util_pct;
    power_sum += x.power_w;
    if (x.mem_used_mib >= s.mem_used_max_mib) {
      s.mem_used_max_mib = x.mem_used_mib;
      s.mem_total_mib = x.mem_total_mib;
    }
  }
  std::sort(util.begin(), util.end());
  double n = static_cast<double>(samples.size());
  s.util_mean = util_sum / n;
  s.util_p10 = quantile_sorted(util, 0.10);
  s.power_mean_w = power_sum / n;
  s.mem_used_pct = s.mem_total_mib > 0.0 ? 100.0 * s.mem_used_max_mib / s.mem_total_mib : 0.0;
  return s;
}

std::string gpu_sample_json(const GpuSample& x) {
  // NVML reports whole percents, MiB and MHz; time to the millisecond, power to 0.1 W.
  return JsonObject{{"t_s", std::round(x.t_s * 1e3) / 1e3},
                    {"util_pct", std::llround(x.util_pct)},
                    {"mem_used_mib", std::llround(x.mem_used_mib)},
                    {"mem_total_mib", std::llround(x.mem_total_mib)},
                    {"sm_clock_mhz", std::llround(x.sm_clock_mhz)},
                    {"power_w", std::round(x.power_w * 10.0) / 10.0}}
      .dump();
}

int nvml_index_for_cuda_device(int cuda_index, const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) return cuda_index;
  std::vector<int> ids;
  std::stringstream list(cuda_visible_devices);
  std::string item;
  while (std::getline(list, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) {
      log::debug(
          "gpu monitor: CUDA_VISIBLE_DEVICES='{}' is not a plain index list; using NVML "
          "device {} for CUDA device {}",
          cuda_visible_devices, cuda_index, cuda_index);
      return cuda_index;
    }
    ids.push_back(std::atoi(item.c_str()));
  }
  if (cuda_index < 0 || cuda_index >= static_cast<int>(ids.size())) {
    throw Error(
        fmt::format("gpu monitor: CUDA device {} is not among CUDA_VISIBLE_DEVICES='{}' "
                    "({} visible)",
                    cuda_index, cuda_visible_devices, ids.size()));
  }
  return ids[static_cast<size_t>(cuda_index)];
}

namespace {

// NVML is loaded and initialised once per process and never unloaded: unloading and reloading
// libnvidia-ml in one process crashed the second monitor (seen on the H200 machine), and an
// nvmlShutdown during static destruction can run after the driver's own teardown.
const detail::NvmlLibrary* process_nvml() {
  static const detail::NvmlLibrary* const library = []() -> const detail::NvmlLibrary* {
    auto* candidate = new detail::NvmlLibrary();  // intentionally never freed (see above)
    return candidate->load() ? candidate : nullptr;
  }();
  return library;
}

}  // namespace

GpuMonitor::GpuMonitor(int device_index, std::string jsonl_path, int interval_ms,
                       std::chrono::steady_clock::time_point t0)
    : jsonl_path_(std::move(jsonl_path)), interval_ms_(interval_ms), t0_(t0) {
  if (interval_ms < 10 || interval_ms > 10000) {
    throw Error(
        fmt::format("gpu monitor: interval_ms must be in [10, 10000], got {}", interval_ms));
  }
  const detail::NvmlLibrary* nvml = process_nvml();
  if (nvml == nullptr) return;
  int nvml_index = nvml_index_for_cuda_device(device_index, std::getenv("CUDA_VISIBLE_DEVICES"));
  detail::nvmlDevice_t device = nullptr;
  detail::nvmlReturn_t rc =
      nvml->get_handle_by_index(static_cast<unsigned int>(nvml_index), &device);
  if (rc != detail::kNvmlSuccess || device == nullptr) {
    log::debug(
        "gpu monitor: NVML has no device {} (CUDA device {}, NVML error {}); GPU sampling "
        "is off",
        nvml_index, device_index, rc);
    return;
  }
  char name[detail::kNvmlNameBufferSize] = {};
  if (nvml->get_name(device, name, sizeof(name)) == detail::kNvmlSuccess) device_name_ = name;
  device_ = device;
  nvml_ = nvml;
  log::debug("gpu monitor: sampling NVML device {} ({}) every {} ms into {}", nvml_index,
             device_name_, interval_ms_, jsonl_path_);
}

GpuMonitor::~GpuMonitor() {
  stop();
}

void GpuMonitor::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!available() || thread_.joinable()) return;
  // Opened here, not in the thread, so that a bad path is an error of start() on the caller.
  std::FILE* file = std::fopen(jsonl_path_.c_str(), "w");
  if (file == nullptr) {
    throw Error(fmt::format("gpu monitor: cannot open '{}' for writing: {}", jsonl_path_,
                            std::strerror(errno)));
  }
  std::fclose(file);
  stop_requested_ = false;
  thread_ = std::thread(&GpuMonitor::sample_loop, this);
}

void GpuMonitor::stop() {
  std::thread worker;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) return;
    stop_requested_ = true;
    worker = std::move(thread_);
  }
  wake_.notify_all();
  worker.join();
}

bool GpuMonitor::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return thread_.joinable();
}

GpuSummary GpuMonitor::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return summarize_gpu_samples(samples_);
}

std::vector<GpuSample> GpuMonitor::samples() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return samples_;
}

std::optional<GpuSample> GpuMonitor::read_sample() const {
  auto device = static_cast<detail::nvmlDevice_t>(device_);
  GpuSample s;
  s.t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  detail::nvmlUtilization_t util{};
  if (nvml_->get_utilization(device, &util) != detail::kNvmlSuccess) return std::nullopt;
  s.util_pct = util.gpu;
  // Memory, clock and power are optional on some boards (power is unsupported on a few): a failed
  // query leaves the field at 0 rather than dropping the utilisation sample.
  detail::nvmlMemory_t mem{};
  if (nvml_->get_memory(device, &mem) == detail::kNvmlSuccess) {
    s.mem_used_mib = static_cast<double>(mem.used) / kMiB;
    s.mem_total_mib = static_cast<double>(mem.total) / kMiB;
  }
  unsigned int clock_mhz = 0;
  if (nvml_->get_clock(device, detail::kNvmlClockSm, &clock_mhz) == detail::kNvmlSuccess) {
    s.sm_clock_mhz = clock_mhz;
  }
  unsigned int power_mw = 0;
  if (nvml_->get_power(device, &power_mw) == detail::kNvmlSuccess) s.power_w = power_mw / 1000.0;
  return s;
}

void GpuMonitor::sample_loop() {
  std::FILE* file = std::fopen(jsonl_path_.c_str(), "a");
  if (file == nullptr) {
    log::warn("gpu monitor: cannot reopen '{}': {}; samples kept in memory only", jsonl_path_,
              std::strerror(errno));
  }
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_requested_) {
    lock.unlock();
    std::optional<GpuSample> sample = read_sample();  // NVML calls take ~0.1-1 ms: not under lock
    if (sample && file != nullptr) {
      // One line per sample, flushed, so a crashed run still leaves a readable timeline.
      std::fputs((gpu_sample_json(*sample) + "\n").c_str(), file);
      std::fflush(file);
    }
    lock.lock();
    if (sample) samples_.push_back(*sample);
    // Fixed-rate schedule: drift from the NVML call time does not accumulate.
    next += std::chrono::milliseconds(interval_ms_);
    next = std::max(next, std::chrono::steady_clock::now());  // a slow NVML call skips, not bursts
    wake_.wait_until(lock, next, [this] { return stop_requested_; });
  }
  lock.unlock();
  if (file != nullptr) std::fclose(file);
}

}  // namespace brrr
