// StepGraph on ATen's CUDAGraph: capture on a side stream into a private pool, replay on the
// current stream, and a clean way back when a capture fails.
#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "trainer/step_graph.h"

namespace brrr {

// The allocator's pool id (std::pair of capture ids), spelled as the graph API returns it: its
// namespace moved between libtorch versions.
using PoolId = decltype(at::cuda::graph_pool_handle());

namespace {

/// The capture streams a process has taken from ATen's pool, free ones per device. A StepGraph
/// borrows one for its life and gives it back, so the graphed fits of one process (a sweep, the
/// tests) run on the same stream instead of a new one each: cuBLAS keeps a workspace per
/// (handle, stream) for the life of the process (66 MiB a stream for GPT-2, RESULTS section 8),
/// and ATen's pool hands out 32 streams a device in turn. StepGraphs alive at once get streams
/// of their own (one stream cannot hold two captures).
class CaptureStreams {
 public:
  at::cuda::CUDAStream take(c10::DeviceIndex index) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::vector<at::cuda::CUDAStream>& free = free_[index];
    if (free.empty()) return at::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    const at::cuda::CUDAStream stream = free.back();
    free.pop_back();
    return stream;
  }
  void give_back(const at::cuda::CUDAStream& stream) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_[stream.device_index()].push_back(stream);
  }

 private:
  std::mutex mutex_;
  std::map<c10::DeviceIndex, std::vector<at::cuda::CUDAStream>> free_;
};

CaptureStreams& capture_streams() {
  static CaptureStreams streams;
  return streams;
}

}  // namespace

struct StepGraph::Impl {
  explicit Impl(c10::DeviceIndex index) : stream(capture_streams().take(index)) {}
  ~Impl() {
    graph.reset();  // before the stream can be another StepGraph's
    capture_streams().give_back(stream);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  at::cuda::CUDAStream stream;  // the capture (and warm-up) stream
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  PoolId pool{0, 0};
};

namespace {

std::string first_line(const std::string& what) {
  return what.substr(0, what.find('\n'));
}

/// `other` waits for the work queued so far on `stream` (no host wait).
void wait_for(const at::cuda::CUDAStream& stream, const at::cuda::CUDAStream& other) {
  at::cuda::CUDAEvent done;
  done.record(stream);
  done.block(other);
}

/// Newer ATen also routes the capture's pinned host allocations to the pool; a template, so that
/// the call compiles away on an ATen without it.
template <typename HostAllocator>
void release_host_pool(HostAllocator* host, PoolId pool) {
  if constexpr (requires {
                  host->end_allocate_to_pool(pool);
                  host->release_pool(pool);
                }) {
    try {
      host->end_allocate_to_pool(pool);
      host->release_pool(pool);
    } catch (const c10::Error&) {  // an allocator without pools: nothing was routed
    }
  }
}

/// Undoes what CUDAGraph::capture_begin set up when its capture_end cannot (cudaStreamEndCapture
/// failed on an invalidated capture, so capture_end threw before routing the allocators back):
/// without this the caching allocator would keep the pool's capture "underway" and defer every
/// later free.
void end_failed_capture(c10::DeviceIndex device, const at::cuda::CUDAStream& stream, PoolId pool) {
  cudaStreamCaptureStatus status{};
  if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    (void)cudaStreamEndCapture(stream.stream(), &partial);
    if (partial != nullptr) (void)cudaGraphDestroy(partial);
  }
  c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
  c10::cuda::CUDACachingAllocator::releasePool(device, pool);
  release_host_pool(at::getHostAllocator(at::kCUDA), pool);
  (void)cudaGetLastError();  // the capture's error is not sticky; leave none pending
}

}  // namespace

bool StepGraph::available() {
  return true;
}

StepGraph::StepGraph(c10::Device device) : device_(device) {
  if (!device_.is_cuda()) {
    throw Error("StepGraph: CUDA graphs need a CUDA device, got " + device_.str());
  }
  if (!device_.has_index()) device_ = c10::Device(c10::kCUDA, c10::cuda::current_device());
  impl_ = std::make_unique<Impl>(device_.index());
}

StepGraph::~StepGraph() {
  reset();
}

void StepGraph::reset() {
  if (impl_ && impl_->graph) {
    // Replays still queued may read the pool and the inputs: let them finish first.
    at::cuda::getCurrentCUDAStream(device_.index()).synchronize();
    impl_->graph.reset();  // releases the pool (CUDAGraph::reset)
  }
  inputs_.clear();
  signature_.clear();
  captured_ = false;
}

void StepGraph::run_on_capture_stream(const std::function<void()>& fn) {
  const c10::cuda::CUDAGuard device_guard(device_);
  const at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream(device_.index());
  wait_for(current, impl_->stream);
  {
    const c10::cuda::CUDAStreamGuard on_side(impl_->stream);
    fn();
  }
  wait_for(impl_->stream, current);
}

std::optional<std::string> StepGraph::capture(const std::vector<Batch>& micro_batches,
                                              const Body& body) {
  reset();
  const c10::cuda::CUDAGuard device_guard(device_);
  const at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream(device_.index());
  // Static inputs in the ordinary pool (they outlive any graph), with the batches' layouts.
  // Nothing runs during the capture, so they are filled by the replay() that takes the step.
  for (const Batch& batch : micro_batches) {
    Batch buffers;
    for (const auto& [key, tensor] : batch) buffers[key] = at::empty_like(tensor);
    inputs_.push_back(std::move(buffers));
  }
  wait_for(current, impl_->stream);

  impl_->pool = at::cuda::graph_pool_handle();
  impl_->graph = std::make_unique<at::cuda::CUDAGraph>();
  std::string failure;
  bool began = false;
  {
    const c10::cuda::CUDAStreamGuard on_side(impl_->stream);
    try {
      impl_->graph->capture_begin(impl_->pool);
      began = true;
      body(inputs_);
    } catch (const c10::Error& e) {
      failure = first_line(e.what_without_backtrace());
    } catch (const std::exception& e) {
      failure = first_line(e.what());
    }
    if (began) {
      try {
        impl_->graph->capture_end();
      } catch (const c10::Error& e) {
        if (failure.empty()) failure = first_line(e.what_without_backtrace());
        end_failed_capture(device_.index(), impl_->stream, impl_->pool);
      }
    }
  }
  if (!failure.empty()) {
    impl_->graph.reset();  // a graph that did capture (the body threw after) releases its pool
    inputs_.clear();
    (void)cudaGetLastError();
    return failure;
  }
  wait_for(impl_->stream, current);
  signature_ = signature(micro_batches);
  captured_ = true;
  return std::nullopt;
}

void StepGraph::replay(const std::vector<Batch>& micro_batches) {
  if (!matches(micro_batches)) {
    throw Error("StepGraph::replay: the step's batches (" + signature(micro_batches) +
                ") are not those captured (" + signature_ + ")");
  }
  const c10::cuda::CUDAGuard device_guard(device_);
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    for (const auto& [key, tensor] : micro_batches[i]) {
      inputs_[i].at(key).copy_(tensor, /*non_blocking=*/true);
    }
  }
  impl_->graph->replay();
}

}  // namespace brrr
