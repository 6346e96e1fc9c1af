#include "trainer/observe/step_timer.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>

namespace brrr {

std::map<std::string, double> StepBreakdown::as_map() const {
  std::map<std::string, double> m{{"data_wait", data_wait_ms},
                                  {"forward", forward_ms},
                                  {"backward", backward_ms},
                                  {"optimizer", optimizer_ms},
                                  {"other", other_ms}};
  if (gpu_idle_ms > 0) m["gpu_idle"] = gpu_idle_ms;
  if (graph_ms > 0) m["graph"] = graph_ms;
  if (has_copies) m["copy"] = copy_ms;
  return m;
}

StepTimer::StepTimer(c10::Device device)
    : device_(device),
      use_events_(device.is_cuda()),
      window_start_(std::chrono::steady_clock::now()) {}

double StepTimer::host_now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - window_start_)
      .count();
}

void StepTimer::record_event(size_t index) {
  while (events_.size() <= index) {
    events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
  }
  c10::impl::VirtualGuardImpl impl(device_.type());
  events_[index].record(impl.getStream(device_));
}

void StepTimer::step_begin() {
  if (window_open_) return;
  window_open_ = true;
  window_start_ = std::chrono::steady_clock::now();
  if (use_events_) record_event(0);
}

void StepTimer::add_data_wait(double seconds) {
  pending_wait_ms_ += seconds * 1e3;
}

void StepTimer::set_copy_events(
    std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> copy) {
  if (copy.first && copy.second) pending_copies_.push_back(std::move(copy));
}

void StepTimer::mark(Mark mark) {
  step_begin();  // a mark outside a step still belongs to a window (no-op inside one)
  size_t index = 0;
  if (use_events_) {
    index = stamps_.size() + 1;
    record_event(index);
  }
  Stamp stamp{mark, host_now_ms(), index, 0.0, {}};
  if (mark == Mark::kForwardBegin) {
    stamp.data_wait_ms = pending_wait_ms_;
    pending_wait_ms_ = 0;
    if (use_events_) stamp.copies = std::move(pending_copies_);
  }
  pending_copies_.clear();
  stamps_.push_back(std::move(stamp));
}

void StepTimer::step_end() {
  ++steps_;
}

StepBreakdown StepTimer::collect() {
  StepBreakdown out;
  out.steps = steps_;
  if (steps_ == 0) return out;
  if (use_events_ && !stamps_.empty()) events_[stamps_.back().event_index].synchronize();
  const double wall_ms = host_now_ms();
  // Duration from the previous mark (or the window's start) to mark i, on the GPU timeline
  // (events) or the host clock.
  auto since_previous = [&](size_t i) {
    if (use_events_) {
      const size_t previous = i == 0 ? 0 : stamps_[i - 1].event_index;
      return static_cast<double>(events_[previous].elapsedTime(events_[stamps_[i].event_index]));
    }
    return stamps_[i].host_ms - (i == 0 ? 0.0 : stamps_[i - 1].host_ms);
  };
  // Whole copies, overlapped or not (complete: the compute stream waited on each).
  for (const Stamp& s : stamps_) {
    for (const auto& [begin, end] : s.copies) {
      out.copy_total_ms += begin->elapsedTime(*end);
      out.has_copies = true;
    }
  }
  for (size_t i = 0; i < stamps_.size(); ++i) {
    const double ms = since_previous(i);
    switch (stamps_[i].mark) {
      case Mark::kForwardEnd:
        out.forward_ms += ms;
        break;
      case Mark::kBackwardEnd:
        out.backward_ms += ms;
        break;
      case Mark::kOptimizerEnd:
        out.optimizer_ms += ms;
        break;
      case Mark::kGraphEnd:
        out.graph_ms += ms;
        break;
      case Mark::kForwardBegin:
        // The gap before a forward. On the host it holds the loader wait (counted from the
        // waits themselves below); on the GPU timeline the compute stream was idle in it.
        if (use_events_) {
          // Each copy ran over [begin, end] relative to the gap's start; the parts of them inside
          // the gap are copy time the compute stream waited for. The copies of one copy stream
          // do not overlap each other, so the parts add up.
          double exposed_copy = 0;
          const c10::Event& gap_start = events_[i == 0 ? 0 : stamps_[i - 1].event_index];
          for (const auto& [copy_begin, copy_end] : stamps_[i].copies) {
            const double begin = gap_start.elapsedTime(*copy_begin);
            const double end = gap_start.elapsedTime(*copy_end);
            exposed_copy += std::clamp(std::min(ms, end) - std::max(0.0, begin), 0.0, ms);
          }
          exposed_copy = std::min(exposed_copy, ms);
          const double exposed_wait = std::min(ms - exposed_copy, stamps_[i].data_wait_ms);
          out.copy_ms += exposed_copy;
          out.data_wait_ms += exposed_wait;
          out.gpu_idle_ms += ms - exposed_copy - exposed_wait;
        }
        break;
    }
  }
  out.host_data_wait_ms = pending_wait_ms_;
  for (const Stamp& s : stamps_) out.host_data_wait_ms += s.data_wait_ms;
  if (!use_events_) out.data_wait_ms = out.host_data_wait_ms;
  const double n = static_cast<double>(steps_);
  out.step_ms = wall_ms / n;
  out.host_data_wait_ms /= n;
  out.data_wait_ms /= n;
  out.forward_ms /= n;
  out.backward_ms /= n;
  out.optimizer_ms /= n;
  out.graph_ms /= n;
  out.gpu_idle_ms /= n;
  out.copy_ms /= n;
  out.copy_total_ms /= n;
  // The rest of the wall time. On CUDA the GPU phases come from another clock, so the difference
  // can be a hair below zero; it is never reported negative.
  out.other_ms =
      std::max(0.0, out.step_ms - out.data_wait_ms - out.copy_ms - out.gpu_idle_ms -
                        out.forward_ms - out.backward_ms - out.optimizer_ms - out.graph_ms);
  stamps_.clear();
  pending_wait_ms_ = 0;
  steps_ = 0;
  window_open_ = false;
  return out;
}

}  // namespace brrr
