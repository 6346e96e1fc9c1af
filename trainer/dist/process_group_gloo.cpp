// c10d's Gloo backend. Its header is compiled only with USE_C10D_GLOO (as PyTorch builds it) and
// needs Gloo's own headers (cmake/BrrrDependencies.cmake finds them); the precompiled header
// does not include it, so the macro is defined here, before the include.
#define USE_C10D_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

#include "trainer/dist/process_group.h"

namespace brrr {

bool gloo_available() {
  return true;
}

namespace detail {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // GLOO_SOCKET_IFNAME picks the network interface, as in torch.distributed; else the one the
  // host name resolves to (loopback on a single machine without a network).
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

}  // namespace detail
}  // namespace brrr
