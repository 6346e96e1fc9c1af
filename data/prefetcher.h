#pragma once
// Prefetcher: overlaps the host-to-device copy of batch N+1 with the compute of step N.
//
// On CUDA, batch N+1 is copied with non_blocking=true on a dedicated copy stream (a pool stream,
// through c10's device-generic Stream/Event API, so this compiles without CUDA) and an event is
// recorded after the copy. next() makes the caller's current (compute) stream wait on that event,
// never the host, and record_stream()s the device tensors on the compute stream so the caching
// allocator cannot hand their memory out before that compute is done.
//
// Invariant: a host batch (a pinned ring slot the DMA reads from) stays alive until its copy
// event has completed; only then may the loader reuse the slot. At most kMaxRetired copied host
// batches wait for their event; beyond that next() waits for the oldest copy (only possible when
// the GPU is already steps behind the host).
//
// On CPU the prefetcher passes the loader's batches through.
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "data/data_loader.h"

namespace brrr {

class Prefetcher {
 public:
  /// Copied host batches whose event may still be pending, kept before next() waits on one.
  static constexpr size_t kMaxRetired = 2;

  /// Batches of `loader` on `device` (CPU: passed through; CUDA: copied ahead on a copy stream).
  /// The loader must outlive the prefetcher.
  Prefetcher(DataLoader& loader, c10::Device device);
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  /// Waits for copies still in flight (their host slots must not be reused under the DMA).
  ~Prefetcher();

  /// Calls loader.start_epoch() and drops the batch staged from the old position.
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  /// The next batch on the device, ready to use on the current stream; nullopt at the epoch's
  /// end. Also notices a loader.start_epoch() called directly and re-stages.
  std::optional<Batch> next();
  /// Host seconds spent waiting for the loader in the last next().
  double last_wait_seconds() const { return last_wait_seconds_; }
  /// Timing events on the copy stream around the copy of the batch the last next() returned
  /// (begin, end); null on CPU. Shared so that a StepTimer can read them once they completed.
  std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> last_copy_events() const {
    return last_copy_events_;
  }
  const c10::Device& device() const { return device_; }

 private:
  struct Staged {
    Batch host;                              // views of a (pinned) ring slot
    Batch device;                            // same keys, on device_, written by the copy stream
    std::shared_ptr<c10::Event> copy_begin;  // timing events on the copy stream: before the copies
    std::shared_ptr<c10::Event> copied;      // and after them
  };

  std::optional<Staged> stage(double* wait_seconds);
  void retire(Staged staged);
  void drop_completed();
  void reset_staged();

  DataLoader& loader_;
  c10::Device device_;
  std::optional<c10::Stream> copy_stream_;  // CUDA only
  std::optional<Staged> staged_;            // batch N+1, copy in flight
  bool primed_ = false;                     // staged_ reflects the loader's position
  int64_t staged_epoch_ = -1;               // loader position right after staging
  int64_t staged_consumed_ = -1;
  std::deque<Staged> retired_;  // handed out; host kept until `copied` completes
  double last_wait_seconds_ = 0.0;
  std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> last_copy_events_;
};

}  // namespace brrr
