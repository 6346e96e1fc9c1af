#include "trainer/cuda_graph_policy.h"

#include <fmt/format.h>

#include "core/error.h"

namespace brrr {
namespace {

/// The first condition that rules a capture out, or "" when none does.
std::string blocker(const CudaGraphConditions& c) {
  if (!c.device.is_cuda()) {
    return fmt::format("the run is on {} (CUDA graphs need a CUDA device)", c.device.str());
  }
  if (!c.graphs_built) return "this brrr was built without CUDA";
  if (!c.fused_optimizer) {
    return "optim.fused is false: the foreach optimizer computes its lr and bias corrections on "
           "the host, so a replay would repeat the captured values (use optim.fused: auto)";
  }
  if (c.data_parallel) {
    return fmt::format(
        "data-parallel ({} rank{}): the c10d Reducer prepares every backward on the "
        "host, which a replay would skip",
        c.world_size, c.world_size == 1 ? "" : "s");
  }
  return "";
}

}  // namespace

CudaGraphDecision decide_cuda_graph(const CudaGraphConditions& conditions) {
  const std::string& setting = conditions.setting;
  if (setting == "false") return {GraphMode::kOff, "train.cuda_graph is false", false};
  if (setting != "auto" && setting != "true") {
    throw ConfigError("train.cuda_graph: unknown value '" + setting +
                      "' (expected auto, true or false)");
  }
  const std::string why_not = blocker(conditions);
  if (why_not.empty())
    return {setting == "true" ? GraphMode::kRequire : GraphMode::kTry, "", false};
  return {GraphMode::kOff, why_not, /*refused=*/setting == "true"};
}

std::string capture_refused_message(const std::string& what, bool host_synced) {
  if (host_synced) {
    return fmt::format(
        "the step synchronises the host with the device (.item(), .cpu(), printing a tensor, "
        "nonzero() or boolean-mask indexing in training_step or the model?), which a CUDA graph "
        "cannot capture: {}",
        what);
  }
  return fmt::format("an operation of the step refused CUDA-graph capture: {}", what);
}

}  // namespace brrr
