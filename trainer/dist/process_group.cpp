#include "trainer/dist/process_group.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/error.h"

namespace brrr {

c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(const DistEnv& env,
                                                          const c10::Device& device,
                                                          std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0 && !env.agent_store;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = !env.agent_store;
  options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    throw Error(fmt::format("rank {}: cannot join the store at {}:{} within {} s: {}", env.rank,
                            env.master_addr, env.master_port, timeout.count() / 1000, e.what()));
  }
  // A prefix of its own, as torch.distributed gives each group: other users of the store (an
  // agent) never see brrr's keys.
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("brrr/0", store);
  const int rank = static_cast<int>(env.rank);
  const int size = static_cast<int>(env.world_size);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(prefixed, rank, size);
  if (device.is_cuda()) {
    auto backend = detail::make_nccl_backend(prefixed, rank, size, timeout, device);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
    group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, backend);
    group->setBoundDeviceId(device);
  } else if (device.is_cpu()) {
    auto backend = detail::make_gloo_backend(prefixed, rank, size, timeout);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  } else {
    throw Error(fmt::format("data-parallel training on {} tensors is not supported (cpu or cuda)",
                            device.str()));
  }
  return group;
}

}  // namespace brrr
