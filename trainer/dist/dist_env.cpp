#include "trainer/dist/dist_env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace brrr {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw UsageError("distributed launch: " + what);
}

int64_t integer(const char* name, const char* value) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (*value == '\0' || *end != '\0' || errno != 0) {
    fail(fmt::format("{}='{}' is not an integer", name, value));
  }
  return v;
}

}  // namespace

std::optional<DistEnv> read_dist_env(const std::function<const char*(const char*)>& get) {
  const char* rank = get("RANK");
  const char* world = get("WORLD_SIZE");
  if (rank == nullptr && world == nullptr) return std::nullopt;
  const auto require = [&](const char* name) {
    const char* v = get(name);
    if (v == nullptr || *v == '\0') {
      fail(
          fmt::format("{} is not set (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, "
                      "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; {} is)",
                      name, rank != nullptr ? "RANK" : "WORLD_SIZE"));
    }
    return v;
  };
  DistEnv env;
  env.world_size = integer("WORLD_SIZE", require("WORLD_SIZE"));
  env.rank = integer("RANK", require("RANK"));
  env.master_addr = require("MASTER_ADDR");
  env.master_port = integer("MASTER_PORT", require("MASTER_PORT"));
  if (env.world_size < 1) fail(fmt::format("WORLD_SIZE={} must be >= 1", env.world_size));
  if (env.rank < 0 || env.rank >= env.world_size) {
    fail(fmt::format("RANK={} is not in [0, WORLD_SIZE={})", env.rank, env.world_size));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    fail(fmt::format("MASTER_PORT={} is not a port (1..65535)", env.master_port));
  }
  const char* local_rank = get("LOCAL_RANK");
  const char* local_world = get("LOCAL_WORLD_SIZE");
  if ((local_rank == nullptr) != (local_world == nullptr)) {
    fail(fmt::format("{} is set but {} is not", local_rank ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE",
                     local_rank ? "LOCAL_WORLD_SIZE" : "LOCAL_RANK"));
  }
  env.local_rank = local_rank ? integer("LOCAL_RANK", local_rank) : env.rank;
  env.local_world_size = local_world ? integer("LOCAL_WORLD_SIZE", local_world) : env.world_size;
  if (env.local_world_size < 1 || env.local_world_size > env.world_size) {
    fail(fmt::format("LOCAL_WORLD_SIZE={} is not in [1, WORLD_SIZE={}]", env.local_world_size,
                     env.world_size));
  }
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size) {
    fail(fmt::format("LOCAL_RANK={} is not in [0, LOCAL_WORLD_SIZE={})", env.local_rank,
                     env.local_world_size));
  }
  const char* agent = get("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && std::string(agent) == "True";
  return env;
}

}  // namespace brrr
