#pragma once
// Records a Chrome/Perfetto trace of a window of training steps with libtorch's Kineto profiler
// (`train.profile: {start_step, steps, memory}`), CPU ops and, on CUDA, kernels and copies; with
// `memory`, also each allocation and free (`[memory]` events: address, bytes, total allocated).
#include <c10/core/Device.h>

#include <string>

namespace brrr {

class TraceRecorder {
 public:
  /// Starts recording; the trace goes to `path` when stop() is called (or on destruction).
  /// `memory` adds the allocator's events (PyTorch's `profile_memory=True`).
  TraceRecorder(std::string path, c10::Device device, bool memory = false);
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  /// Stops and writes the trace file. Idempotent.
  void stop();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool active_ = false;
};

}  // namespace brrr
