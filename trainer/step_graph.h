#pragma once
// StepGraph: one whole optimizer step (every micro-batch's forward and backward, unscale, clip,
// optimizer, scaler update, the window's device sums) captured once as a CUDA graph and replayed
// every step after, so the host launches one graph instead of ~1,000 kernels.
//
// Invariants:
//  * The graph reads its inputs from static buffers owned here, one Batch per micro-batch,
//    allocated before the capture (outside the graph's pool). replay() first copies the step's
//    batches into them on the current stream: one device-to-device copy per tensor. The
//    prefetcher's copy of batch N+1 overlaps step N, so it cannot write the buffers that step N
//    reads; this copy is the price (for ResNet-50 at batch 64 under bf16: the normalised batch,
//    19.3 MB, about 10 microseconds).
//  * Capture runs on a side stream into a private memory pool (PyTorch's recipe: the warm-up
//    just before it runs eagerly on that same stream, so cuBLAS workspaces and cuDNN plans exist
//    before capture; StepRunner runs every eager step there, so that only this stream's cuBLAS
//    workspaces exist); replay runs on the current stream. The side stream is borrowed for the
//    StepGraph's life from the process's capture streams and given back, so a later StepGraph
//    (the next fit) reuses it and its workspaces; StepGraphs alive at once get streams of their
//    own. The default CUDA generator is part of the capture (ATen's CUDAGraph registers it): every
//    replay advances its offset as the eager step would, so dropout masks differ between replays
//    and the generator state checkpoints and resumes as in eager mode.
//  * Everything the captured step reads that changes per step lives on the device and is written
//    before replay() (the lr, the step number) or updated in place by the step itself (optimizer
//    state, scaler, window sums). Host values read during the capture are frozen into it.
//  * A failed capture leaves no capture running, no allocator routed to the graph's pool and no
//    CUDA error pending: the process carries on eagerly.
// Without CUDA (step_graph_nocuda.cpp) nothing can be captured; decide_cuda_graph never asks.
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace brrr {

class StepGraph {
 public:
  /// The captured work: one step over these (static) micro-batches.
  using Body = std::function<void(const std::vector<Batch>& micro_batches)>;

  /// Whether this build can capture CUDA graphs (compiled with CUDA).
  static bool available();

  explicit StepGraph(c10::Device device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  bool captured() const { return captured_; }
  /// Whether `micro_batches` have the count, keys, shapes, dtypes and devices of the captured
  /// ones (false when nothing is captured).
  bool matches(const std::vector<Batch>& micro_batches) const;
  /// "2 x {input_ids: (16, 1024) Long, ...}": what a graph is keyed on, for messages.
  static std::string signature(const std::vector<Batch>& micro_batches);

  /// Runs `fn` eagerly on the capture stream, after the current stream's queued work and before
  /// its later work: the warm-up steps before a capture, and eager steps between replays.
  void run_on_capture_stream(const std::function<void()>& fn);

  /// Allocates the static inputs as copies of `micro_batches` and captures `body` on them.
  /// Nothing runs on the device during a capture: call replay() to take the step. Returns the
  /// first line of the error when the capture failed (the graph is then empty and the process
  /// clean), nullopt on success. Drops any earlier graph first.
  std::optional<std::string> capture(const std::vector<Batch>& micro_batches, const Body& body);

  /// Copies `micro_batches` (matches() must hold) into the static inputs and replays the step,
  /// both on the current stream.
  void replay(const std::vector<Batch>& micro_batches);

  /// Drops the graph, its pool and the static inputs.
  void reset();

 private:
  struct Impl;  // the CUDA part (step_graph_cuda.cpp)

  c10::Device device_;
  std::unique_ptr<Impl> impl_;
  std::vector<Batch> inputs_;  // the static inputs the graph reads
  std::string signature_;      // signature(inputs_)
  bool captured_ = false;
};

}  // namespace brrr
