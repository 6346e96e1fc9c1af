#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "core/device_info.h"

namespace brrr::detail {

std::string cuda_device_name(int index) {
  return at::cuda::getDeviceProperties(index)->name;
}

int cuda_compute_capability_major(int index) {
  return at::cuda::getDeviceProperties(index)->major;
}

double cuda_peak_memory_mib(int index) {
  // The caching allocator exists once CUDA is initialised (its statistics before that throw).
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  using Stat = c10::CachingAllocator::StatType;
  return static_cast<double>(stats.allocated_bytes[static_cast<size_t>(Stat::AGGREGATE)].peak) /
         (1024.0 * 1024.0);
}

void cuda_reset_peak_memory(int index) {
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

void cuda_empty_cache() {
  c10::cuda::CUDACachingAllocator::emptyCache();
}

double cuda_total_memory_mib(int index) {
  return static_cast<double>(at::cuda::getDeviceProperties(index)->totalGlobalMem) /
         (1024.0 * 1024.0);
}

}  // namespace brrr::detail
