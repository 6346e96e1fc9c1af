#pragma once
// Page-locking of host memory that brrr allocated itself (the batch ring), so host-to-device
// copies from it are DMA transfers. The CUDA build (host_memory_cuda.cpp) uses cudaHostRegister;
// the CPU build (host_memory_nocuda.cpp) can pin nothing and says so.
#include <cstddef>

namespace brrr::detail {

/// True when this build can page-lock memory and a CUDA device is present.
bool host_pinning_available();

/// Page-locks [ptr, ptr + bytes) once (cudaHostRegister, cudaHostRegisterDefault). Throws
/// brrr::Error naming the CUDA error, file and line on failure, or when pinning is unavailable.
void pin_host_memory(void* ptr, size_t bytes);

/// Undoes pin_host_memory(ptr, ...). Never throws (it runs in destructors); failures are logged.
void unpin_host_memory(void* ptr) noexcept;

}  // namespace brrr::detail
