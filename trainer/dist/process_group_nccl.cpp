// c10d's NCCL backend, for data-parallel training on GPUs. Its header is compiled only with
// USE_C10D_NCCL (as PyTorch builds it) and includes nccl.h (cmake/BrrrDependencies.cmake finds
// the one of libtorch's NCCL wheel); the precompiled header does not include it.
#define USE_C10D_NCCL 1
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "trainer/dist/process_group.h"

namespace brrr {

bool nccl_available() {
  return true;
}

namespace detail {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const c10::Device& device) {
  // NCCL's communicator is created on the current device: this rank's GPU.
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

}  // namespace detail
}  // namespace brrr
