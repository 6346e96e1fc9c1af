#pragma once
// What `train.cuda_graph` (auto | true | false) means for one run, decided once at the start of
// fit(): whether the StepRunner captures its step in a CUDA graph, and if not, why. Pure logic on
// host values, so it is the same (and tested) on a machine without CUDA.
//
// A step can be captured only when everything it reads that changes from step to step lives on
// the device (DESIGN.md, "CUDA-graph step"). What the trainer knows before the first step:
//  - a CUDA device, and a build with CUDA graphs;
//  - a fused optimizer (ATen's _fused_adamw_/_fused_sgd_ read lr, step and found_inf on the
//    device; the foreach path computes the lr and Adam's bias corrections on the host, and skips
//    a non-finite fp16 step with a host read);
//  - one process: the c10d Reducer's per-iteration bookkeeping runs on the host around backward.
// What only the capture itself can tell (a host sync in a user's training_step, an op that refuses
// capture) is found by trying: capture_refused_message() words it.
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace brrr {

/// How the StepRunner treats its step.
enum class GraphMode {
  kOff,      ///< eager steps only
  kTry,      ///< capture; a step that refuses capture runs eagerly from then on (one warning)
  kRequire,  ///< capture; a step that refuses capture is an error
};

struct CudaGraphConditions {
  /// train.cuda_graph: "auto", "true" or "false".
  std::string setting = "auto";
  c10::Device device = c10::Device(c10::kCPU);
  /// This build can capture CUDA graphs (brrr compiled with CUDA).
  bool graphs_built = false;
  /// The optimizer runs ATen's fused kernels (Optimizer::fused()).
  bool fused_optimizer = false;
  /// A data-parallel run (torchrun or --nproc-per-node, even with one rank: its gradients go
  /// through the Reducer) and its number of ranks.
  bool data_parallel = false;
  int64_t world_size = 1;
};

struct CudaGraphDecision {
  GraphMode mode = GraphMode::kOff;
  /// Why the step is not captured ("" when it is): for the plan and the summary.
  std::string reason;
  /// `true` was asked for but a condition fails (`reason`): a configuration error.
  bool refused = false;
};

/// auto: kTry when every condition holds, else kOff with the first one that fails as the reason.
/// true: kRequire, or kOff with `refused` and that reason. false: kOff. Throws ConfigError for any
/// other setting.
CudaGraphDecision decide_cuda_graph(const CudaGraphConditions& conditions);

/// Why a capture failed, for the fallback warning and the error of train.cuda_graph: true.
/// `what`: the first line of the exception the capture raised; `host_synced`: the sync counter
/// saw a host-device synchronisation during the capture.
std::string capture_refused_message(const std::string& what, bool host_synced);

}  // namespace brrr
