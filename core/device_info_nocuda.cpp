#include "core/device_info.h"
#include "core/error.h"

namespace brrr::detail {

std::string cuda_device_name(int index) {
  throw Error("cuda device " + std::to_string(index) + " requested in a brrr built without CUDA");
}

int cuda_compute_capability_major(int /*index*/) {
  return 0;
}

double cuda_peak_memory_mib(int /*index*/) {
  return 0.0;
}

void cuda_reset_peak_memory(int /*index*/) {}

void cuda_empty_cache() {}

double cuda_total_memory_mib(int /*index*/) {
  return 0.0;
}

}  // namespace brrr::detail
