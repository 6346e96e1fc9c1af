// This build has no NCCL backend (a CPU build, or nccl.h was not found; see
// cmake/BrrrDependencies.cmake): GPU process groups say so.
#include "core/error.h"
#include "trainer/dist/process_group.h"

namespace brrr {

bool nccl_available() {
  return false;
}

namespace detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, std::chrono::milliseconds,
                                                    const c10::Device& device) {
  throw Error(fmt::format(
      "this brrr was built without c10d's NCCL backend (a build without CUDA, or nccl.h was not "
      "found), so it cannot train on several GPUs ({}); rebuild with CUDA and NCCL",
      device.str()));
}

}  // namespace detail
}  // namespace brrr
