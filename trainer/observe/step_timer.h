#pragma once
// Where a training step's time goes, measured without adding host-device syncs.
//
// A window is the steps between two collect() calls (a logging interval); step_ms is its wall time
// (from the first step_begin() to the end of collect()'s sync) per step.
//
// On CUDA, phase boundaries are timing events recorded on the compute stream, plus one at the
// window's start; they are read only in collect(), which the trainer calls on logging steps (where
// it syncs anyway). The GPU timeline of the window is then cut into forward, backward, optimizer
// (or, for a step replayed as one CUDA graph, `graph`: its input copies and the whole replay)
// and the gaps before each forward; a gap is booked as `copy` while the batch's host-to-device copy
// was still running, as `data_wait` for as long as the host was waiting for that batch, and as
// `gpu_idle` beyond that. A host data wait the GPU did not notice (it was busy with queued work) is
// not a phase: it costs nothing. On CPU every phase is a host clock interval (the work is
// synchronous there) and data_wait is the host's wait.
//
// Invariant: the phases plus `other` (the rest of the wall time: host work the GPU could not hide,
// logging, callbacks) sum to step_ms.
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
  double step_ms = 0;  ///< wall time of the window per step
  /// CPU: host blocked on the loader. CUDA: the part of that wait the GPU sat idle for.
  double data_wait_ms = 0;
  /// Host blocked on the loader, all of it (on CUDA not a phase: it may overlap GPU work).
  double host_data_wait_ms = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  double optimizer_ms = 0;  ///< unscale, clip, step, zero_grad
  /// CUDA graph steps: the static-input copies and the replay of the whole captured step
  /// (forward, backward and optimizer are not told apart inside it).
  double graph_ms = 0;
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
  /// kGraphEnd closes a step replayed as a CUDA graph (it follows a kForwardBegin).
  enum class Mark { kForwardBegin, kForwardEnd, kBackwardEnd, kOptimizerEnd, kGraphEnd };

  explicit StepTimer(c10::Device device);

  /// Starts a step. Call before fetching the first micro-batch. The first step of a window also
  /// starts the window (host clock and, on CUDA, an event on the current stream).
  void step_begin();
  /// Host time spent waiting for the micro-batch the next kForwardBegin starts on, in seconds.
  void add_data_wait(double seconds);
  /// Records a phase boundary: an event on the current CUDA stream, or the host clock on CPU.
  void mark(Mark mark);
  /// The copy events (Prefetcher::last_copy_events) of a batch the next kForwardBegin starts on.
  /// Called once per micro-batch; a graphed step starts on all its micro-batches at once, so
  /// the copies add up until that mark.
  void set_copy_events(std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> copy);
  /// Ends the step.
  void step_end();
  /// Averages the window since the last collect(); the next step_begin() starts a new one. Syncs
  /// on the last recorded event (CUDA) — call only on logging steps.
  StepBreakdown collect();

 private:
  struct Stamp {
    Mark mark;
    double host_ms;       // host time since the window began
    size_t event_index;   // into events_ (CUDA only; events_[0] is the window's start)
    double data_wait_ms;  // kForwardBegin: the host's wait for its batch(es)
    // kForwardBegin on CUDA: the (begin, end) events of its batches' copies, in copy order.
    std::vector<std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>>> copies;
  };
  double host_now_ms() const;
  void record_event(size_t index);

  c10::Device device_;
  bool use_events_;
  bool window_open_ = false;
  std::chrono::steady_clock::time_point window_start_;
  std::vector<c10::Event> events_;  // reused across windows
  std::vector<Stamp> stamps_;       // this window's marks, in order
  std::vector<std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>>> pending_copies_;
  double pending_wait_ms_ = 0;  // the wait for the batch(es) the next kForwardBegin starts on
  int64_t steps_ = 0;
};

}  // namespace brrr
