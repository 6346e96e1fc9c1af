#pragma once
// CUDA device properties. device_info_cuda.cpp asks the CUDA runtime; device_info_nocuda.cpp is the
// CPU build's stand-in (CMake picks one).
#include <string>

namespace brrr::detail {

std::string cuda_device_name(int index);
int cuda_compute_capability_major(int index);
/// Peak bytes allocated by the caching allocator on device `index` since start or since the last
/// cuda_reset_peak_memory(index), in MiB.
double cuda_peak_memory_mib(int index);
/// Starts a new peak on device `index`: from now on the peak is measured from what is allocated
/// now (as torch.cuda.reset_peak_memory_stats).
void cuda_reset_peak_memory(int index);
/// Returns cached, unused blocks of the caching allocator to the driver.
void cuda_empty_cache();
/// Total memory of device `index` in MiB.
double cuda_total_memory_mib(int index);

}  // namespace brrr::detail
