// CUDA page-locking of brrr's own host memory. Every CUDA call is checked with file:line.
#include <ATen/Context.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "data/host_memory.h"

#define BRRR_HOST_CUDA_CHECK(call)                                                                \
  do {                                                                                            \
    const cudaError_t brrr_err_ = (call);                                                         \
    if (brrr_err_ != cudaSuccess) {                                                               \
      throw ::brrr::Error(fmt::format("{} failed: {} ({}) at {}:{}", #call,                       \
                                      cudaGetErrorString(brrr_err_), cudaGetErrorName(brrr_err_), \
                                      __FILE__, __LINE__));                                       \
    }                                                                                             \
  } while (0)

namespace brrr::detail {

bool host_pinning_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls are unaffected
    return false;
  }
  return count > 0;
}

void pin_host_memory(void* ptr, size_t bytes) {
  if (!host_pinning_available()) {
    throw Error(
        fmt::format("cannot pin {} bytes of host memory: no CUDA device is visible", bytes));
  }
  // Initialise libtorch's CUDA state first: is_pinned() reports false for every pointer while
  // libtorch has not initialised the device, and both must share the one primary context.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  BRRR_HOST_CUDA_CHECK(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault));
}

void unpin_host_memory(void* ptr) noexcept {
  const cudaError_t err = cudaHostUnregister(ptr);
  if (err != cudaSuccess) {
    log::error("cudaHostUnregister({}) failed: {} at {}:{}", ptr, cudaGetErrorString(err), __FILE__,
               __LINE__);
  }
}

}  // namespace brrr::detail
