#pragma once
// The c10d process group of a distributed run: a TCPStore at MASTER_ADDR:MASTER_PORT (rank 0
// serves it unless torchrun's agent does), and the backend of the run's device: Gloo for CPU
// tensors, NCCL for CUDA tensors. The collectives are c10d's own (what Python's
// torch.distributed runs).
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

#include "trainer/dist/dist_env.h"

namespace brrr {

/// Whether this build has c10d's Gloo backend (it needs Gloo's headers at build time, which the
/// pip libtorch does not ship; Debian's libgloo-dev provides them).
bool gloo_available();

/// Whether this build has c10d's NCCL backend (a CUDA build that found nccl.h).
bool nccl_available();

/// Joins the process group of `env` for tensors on `device` (CPU: Gloo; cuda:N: NCCL on GPU N,
/// which becomes the current device). Every rank must call
/// it; it returns once all `env.world_size` ranks have joined, or throws Error naming the store
/// address and the timeout when they do not within `timeout`. Collectives that wait longer than
/// `timeout` fail with c10d's error instead of hanging.
c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(const DistEnv& env,
                                                          const c10::Device& device,
                                                          std::chrono::milliseconds timeout);

namespace detail {
/// The Gloo backend on `store` (process_group_gloo.cpp; without Gloo, an Error saying so).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout);
/// The NCCL backend on `store` for GPU `device` (process_group_nccl.cpp; without it, an Error).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const c10::Device& device);
}  // namespace detail

}  // namespace brrr
