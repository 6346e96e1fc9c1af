#pragma once
// The distributed launch a process is part of, read from the environment torchrun (and
// `trainer --nproc-per-node`) sets: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, and TORCHELASTIC_USE_AGENT_STORE=True when torchrun's agent already runs the
// store (every rank then connects to it as a client).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace brrr {

struct DistEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  /// The rank on this machine, which picks its GPU (cuda:LOCAL_RANK).
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr;
  int64_t master_port = 0;
  /// The store exists already (torchrun's agent): rank 0 does not start one.
  bool agent_store = false;
};

/// Reads the variables through `get` (getenv by default). No RANK and no WORLD_SIZE: not a
/// distributed launch (nullopt). Otherwise every variable must be there and consistent; a
/// missing or bad one is a UsageError naming it and its value ("RANK=2 is not in [0,
/// WORLD_SIZE=2)"). LOCAL_RANK and LOCAL_WORLD_SIZE may both be absent (one machine: they are
/// RANK and WORLD_SIZE).
std::optional<DistEnv> read_dist_env(const std::function<const char*(const char*)>& get =
                                         [](const char* name) {
                                           return static_cast<const char*>(std::getenv(name));
                                         });

}  // namespace brrr
