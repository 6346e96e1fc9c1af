#include "trainer/step_timer.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>

namespace brrr {

std::map<std::string, double> StepBreakdown::as_map() const {
  std::map<std::string, double> m{{"data_wait", data_wait_ms}, {"forward", forward_ms},
                                  {"backward", backward_ms},   {"optimizer", optimizer_ms},
                                  {"other", other_ms}};
  if (gpu_idle_ms > 0) m["gpu_idle"] = gpu_idle_ms;
  if (has_copies) m["copy"] = copy_ms;
  return m;
}

StepTimer::StepTimer(c10::Device device)
    : device_(device), use_events_(device.is_cuda()), window_start_(std::chrono::steady_clock::now()) {}

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

void StepTimer::step_begin() { step_begin_ms_ = host_now_ms(); }

void StepTimer::add_data_wait(double seconds) { data_wait_ms_ += seconds * 1e3; }

void StepTimer::set_copy_events(
    std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>> copy) {
  pending_copy_ = std::move(copy);
}

void StepTimer::mark(Mark mark) {
  size_t index = 0;
  if (use_events_) {
    index = stamps_.size();
    record_event(index);
  }
  Stamp stamp{mark, host_now_ms(), index, nullptr, nullptr};
  if (mark == Mark::kForwardBegin && use_events_ && pending_copy_.first && pending_copy_.second) {
    stamp.copy_begin = std::move(pending_copy_.first);
    stamp.copy_end = std::move(pending_copy_.second);
  }
  pending_copy_ = {};
  stamps_.push_back(std::move(stamp));
}

void StepTimer::step_end() {
  step_total_ms_ += host_now_ms() - step_begin_ms_;
  ++steps_;
}

StepBreakdown StepTimer::collect() {
  StepBreakdown out;
  out.steps = steps_;
  if (steps_ == 0) return out;
  // Duration between consecutive marks, on the GPU timeline (events) or host clock.
  auto between = [&](size_t a, size_t b) {
    if (use_events_) return events_[stamps_[a].event_index].elapsedTime(events_[stamps_[b].event_index]);
    return stamps_[b].host_ms - stamps_[a].host_ms;
  };
  if (use_events_ && !stamps_.empty()) events_[stamps_.back().event_index].synchronize();
  // Whole copies, overlapped or not (complete: the compute stream waited on each).
  for (const Stamp& s : stamps_) {
    if (!s.copy_begin) continue;
    out.copy_total_ms += s.copy_begin->elapsedTime(*s.copy_end);
    out.has_copies = true;
  }
  for (size_t i = 1; i < stamps_.size(); ++i) {
    const double ms = between(i - 1, i);
    switch (stamps_[i].mark) {
      case Mark::kForwardEnd: out.forward_ms += ms; break;
      case Mark::kBackwardEnd: out.backward_ms += ms; break;
      case Mark::kOptimizerEnd: out.optimizer_ms += ms; break;
      case Mark::kForwardBegin:
        // From the previous step's end (or the previous micro-batch's backward) to this forward:
        // on the GPU timeline this is idle time; on the host it is the loader wait (counted apart).
        if (use_events_) {
          // The copy ran over [begin, end] relative to the gap's start; the part of it inside the
          // gap is copy time the compute stream waited for.
          double exposed = 0;
          if (stamps_[i].copy_begin) {
            const c10::Event& gap_start = events_[stamps_[i - 1].event_index];
            const double begin = gap_start.elapsedTime(*stamps_[i].copy_begin);
            const double end = gap_start.elapsedTime(*stamps_[i].copy_end);
            exposed = std::clamp(std::min(ms, end) - std::max(0.0, begin), 0.0, ms);
          }
          out.copy_ms += exposed;
          out.gpu_idle_ms += ms - exposed;
        }
        break;
    }
  }
  const double n = static_cast<double>(steps_);
  out.step_ms = step_total_ms_ / n;
  out.data_wait_ms = data_wait_ms_ / n;
  out.forward_ms /= n;
  out.backward_ms /= n;
  out.optimizer_ms /= n;
  out.gpu_idle_ms /= n;
  out.copy_ms /= n;
  out.copy_total_ms /= n;
  if (use_events_) {
    // GPU phases overlap host work; `other` is what the host spent outside the data wait and the
    // GPU phases, never negative.
    out.other_ms = std::max(0.0, out.step_ms - out.data_wait_ms - out.forward_ms - out.backward_ms -
                                     out.optimizer_ms - out.copy_ms - out.gpu_idle_ms);
  } else {
    out.other_ms = out.step_ms - out.data_wait_ms - out.forward_ms - out.backward_ms - out.optimizer_ms;
  }
  // New window: keep the last mark so the next window's first gap (idle between steps) is measured.
  stamps_.clear();
  step_total_ms_ = data_wait_ms_ = 0;
  steps_ = 0;
  window_start_ = std::chrono::steady_clock::now();
  return out;
}

}  // namespace brrr
