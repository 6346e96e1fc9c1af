#include "core/device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <torch/cuda.h>

#include <regex>

#include "core/device_info.h"
#include "core/error.h"

namespace brrr {

c10::Device resolve_device(const std::string& name) {
  if (name == "auto") {
    return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  }
  if (name == "cpu") return c10::Device(c10::kCPU);
  static const std::regex kCuda("cuda(:([0-9]+))?");
  std::smatch m;
  if (!std::regex_match(name, m, kCuda)) {
    throw ConfigError(
        fmt::format("run.device: expected auto, cpu, cuda or cuda:N, got '{}'", name));
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    throw ConfigError(
        fmt::format("run.device: '{}' requested but CUDA is not available on this machine "
                    "(use run.device: auto or cpu)",
                    name));
  }
  const int64_t index = m[2].matched ? std::stoll(m[2].str()) : 0;
  if (index >= count) {
    throw ConfigError(
        fmt::format("run.device: '{}' but only {} CUDA device(s) are visible", name, count));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string device_name(const c10::Device& device) {
  if (device.is_cuda()) return detail::cuda_device_name(device.index());
  return fmt::format("CPU ({} threads)", at::get_num_threads());
}

bool has_tensor_cores(const c10::Device& device) {
  return device.is_cuda() && detail::cuda_compute_capability_major(device.index()) >= 8;
}

}  // namespace brrr
