#pragma once
// Learning-rate schedules, stepped once per optimizer step.
//
// Definition of "step": lr_at(k) is the learning rate of optimizer step k, k = 0 .. max_steps-1
// (the first update uses lr_at(0)). This is what torch.optim.lr_scheduler.LambdaLR yields when
// scheduler.step() is called after every optimizer.step(): step k runs with base_lr * lambda(k).
// Beyond max_steps the schedules hold their final value.
//
// Warm-up (all schedules): lambda(k) = k / max(1, warmup_steps) for k < warmup_steps, as
// Hugging Face's get_*_schedule_with_warmup (so step 0 runs with lr 0). After warm-up
// (w = warmup_steps, T = max_steps, m = min_lr_ratio):
//   constant: 1
//   cosine:   m + (1 - m) * 0.5 * (1 + cos(pi * p)),  p = min(1, (k - w) / max(1, T - w))
//             (HF get_cosine_schedule_with_warmup for m = 0, get_cosine_with_min_lr_... else)
//   linear:   m + (1 - m) * max(0, (T - k) / max(1, T - w))   (HF get_linear_schedule_with_warmup)
//   step:     gamma ^ floor(k / step_size)                    (torch StepLR for w = 0)
//   wsd:      D = round(decay_ratio * (T - w)) decay steps at the end; 1 until T - D, then
//             m + (1 - m) * (1 - min(1, (k - (T - D)) / max(1, D)))
//   plateau:  the current lr of torch's ReduceLROnPlateau (threshold_mode rel, cooldown 0,
//             min_lr = m * base_lr), changed only by on_eval(metric).
#include <cstdint>
#include <memory>
#include <string>

#include "core/config.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace brrr {

class LrSchedule {
 public:
  LrSchedule(std::string name, double base_lr, int64_t max_steps, int64_t warmup_steps);
  virtual ~LrSchedule() = default;

  /// Learning rate of optimizer step `step` (0-based, see the file comment). Throws Error for
  /// step < 0.
  virtual double lr_at(int64_t step) const = 0;

  /// Reports an evaluation metric (only `plateau` reacts; the others ignore it).
  virtual void on_eval(double metric);

  /// Writes name, base_lr, max_steps and the schedule's own state.
  virtual void save(torch::serialize::OutputArchive& archive) const;
  /// Restores the state. Throws CheckpointError when the archive holds another schedule; a
  /// different base_lr/max_steps is kept from the configuration (with a warning), so a resumed
  /// run may extend its horizon.
  virtual void load(torch::serialize::InputArchive& archive);

  const std::string& name() const { return name_; }
  double base_lr() const { return base_lr_; }
  int64_t max_steps() const { return max_steps_; }
  int64_t warmup_steps() const { return warmup_steps_; }

 protected:
  /// k / max(1, warmup_steps) during warm-up, else 1.
  double warmup_factor(int64_t step) const;
  void check_step(int64_t step) const;

  std::string name_;
  double base_lr_;
  int64_t max_steps_;
  int64_t warmup_steps_;
};

/// Builds `options.name` (constant, cosine, linear, step, wsd, plateau). Throws ConfigError naming
/// `schedule.*` for unknown names and out-of-range options.
std::unique_ptr<LrSchedule> make_lr_schedule(const ScheduleOptions& options, double base_lr,
                                             int64_t max_steps);

}  // namespace brrr
