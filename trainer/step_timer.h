#pragma once
// Where a training step's time goes, measured without adding host-device syncs.
//
// On CUDA, phase boundaries are timing events recorded on the compute stream; they are read only in
// collect(), which the trainer calls on logging steps (where it syncs anyway). Host-side waits (the
// data loader) are host clock intervals. On CPU every phase is a host clock interval (the work is
// synchronous there). Invariant: the phases of a step plus `other` sum to the step's wall time.
#include <c10/core/Device.h>
#include <c10/core/Event.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace brrr {

/// Mean milliseconds per optimizer step over one logging window.
struct StepBreakdown {
  double step_ms = 0;       ///< host wall time per step (end to end)
  double data_wait_ms = 0;  ///< host blocked on the loader/prefetcher
  double forward_ms = 0;
  double backward_ms = 0;
  double optimizer_ms = 0;  ///< unscale, clip, step, zero_grad
  /// CUDA only: the part of the gaps before forward passes during which the host-to-device copy
  /// of the batch was still running, i.e. copy time the compute stream could not hide.
  double copy_ms = 0;
  double gpu_idle_ms = 0;  ///< CUDA only: compute stream idle between phases, copy_ms excluded
  /// CUDA only: the whole copy on the side stream per step, overlapped with compute (not a phase:
  /// not part of the sum).
  double copy_total_ms = 0;
  bool has_copies = false;
  double other_ms = 0;  ///< step_ms minus everything above (logging, callbacks, host overhead)
  int64_t steps = 0;
  std::map<std::string, double> as_map() const;
};

class StepTimer {
 public:
  enum class Mark { kForwardBegin, kForwardEnd, kBackwardEnd, kOptimizerEnd };

  explicit StepTimer(c10::Device device);

  /// Starts a step (host clock). Call before fetching the first micro-batch.
  void step_begin();
  /// Host time spent waiting for data in this step, in seconds (added, per micro-batch).
  void add_data_wait(double seconds);
  /// Records a phase boundary: an event on the current CUDA stream, or the host clock on CPU.
  void mark(Mark mark);
  /// The copy events (Prefetcher::last_copy_events) of the batch the next kForwardBegin starts on.
  void set_copy_events(std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> copy);
  /// Ends the step (host clock).
  void step_end();
  /// Averages the window since the last collect() and starts a new one. Syncs on the last
  /// recorded event (CUDA) — call only on logging steps.
  StepBreakdown collect();

 private:
  struct Stamp {
    Mark mark;
    double host_ms;                                    // host time since the window began
    size_t event_index;                                // into events_ (CUDA only)
    std::shared_ptr<c10::Event> copy_begin, copy_end;  // kForwardBegin on CUDA: its batch's copy
  };
  double host_now_ms() const;
  void record_event(size_t index);

  c10::Device device_;
  bool use_events_;
  std::chrono::steady_clock::time_point window_start_;
  std::vector<c10::Event> events_;  // reused across windows
  std::vector<Stamp> stamps_;       // this window's marks, in order
  std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> pending_copy_;
  double step_begin_ms_ = 0;
  double step_total_ms_ = 0;
  double data_wait_ms_ = 0;
  int64_t steps_ = 0;
};

}  // namespace brrr
