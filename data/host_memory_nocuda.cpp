// The CPU build's stand-in for host_memory_cuda.cpp: nothing can be page-locked.
#include <fmt/format.h>

#include "core/error.h"
#include "data/host_memory.h"

namespace brrr::detail {

bool host_pinning_available() {
  return false;
}

void pin_host_memory(void* /*ptr*/, size_t bytes) {
  throw Error(fmt::format(
      "cannot pin {} bytes of host memory: brrr was built without CUDA (host memory not pinned)",
      bytes));
}

void unpin_host_memory(void* /*ptr*/) noexcept {}

}  // namespace brrr::detail
