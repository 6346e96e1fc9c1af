#include "trainer/optim/lr_schedule.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/log.h"

namespace brrr {
namespace detail {
namespace {

constexpr double kPi = 3.14159265358979323846;

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw CheckpointError("LrSchedule::load: the checkpoint has no '" + key + "' entry");
  }
  return value;
}

/// Rescales a decay factor f in [0, 1] to [m, 1], in HF's order of operations.
double with_floor(double factor, double min_lr_ratio) {
  return factor * (1.0 - min_lr_ratio) + min_lr_ratio;
}

class ConstantSchedule : public LrSchedule {
 public:
  ConstantSchedule(const ScheduleOptions& o, double base_lr, int64_t max_steps)
      : LrSchedule("constant", base_lr, max_steps, o.warmup_steps) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    return base_lr_ * warmup_factor(step);
  }
};

class CosineSchedule : public LrSchedule {
 public:
  CosineSchedule(const ScheduleOptions& o, double base_lr, int64_t max_steps)
      : LrSchedule("cosine", base_lr, max_steps, o.warmup_steps), min_lr_ratio_(o.min_lr_ratio) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    if (step < warmup_steps_) return base_lr_ * warmup_factor(step);
    const double progress =
        std::min(1.0, static_cast<double>(step - warmup_steps_) /
                          static_cast<double>(std::max<int64_t>(1, max_steps_ - warmup_steps_)));
    const double factor = 0.5 * (1.0 + std::cos(kPi * progress));
    return base_lr_ * std::max(0.0, with_floor(factor, min_lr_ratio_));
  }

 private:
  double min_lr_ratio_;
};

class LinearSchedule : public LrSchedule {
 public:
  LinearSchedule(const ScheduleOptions& o, double base_lr, int64_t max_steps)
      : LrSchedule("linear", base_lr, max_steps, o.warmup_steps), min_lr_ratio_(o.min_lr_ratio) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    if (step < warmup_steps_) return base_lr_ * warmup_factor(step);
    const double factor =
        std::max(0.0, static_cast<double>(max_steps_ - step) /
                          static_cast<double>(std::max<int64_t>(1, max_steps_ - warmup_steps_)));
    return base_lr_ * with_floor(factor, min_lr_ratio_);
  }

 private:
  double min_lr_ratio_;
};

class StepSchedule : public LrSchedule {
 public:
  StepSchedule(const ScheduleOptions& o, double base_lr, int64_t max_steps)
      : LrSchedule("step", base_lr, max_steps, o.warmup_steps),
        step_size_(o.step_size),
        gamma_(o.gamma) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    if (step < warmup_steps_) return base_lr_ * warmup_factor(step);
    return base_lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
  }

 private:
  int64_t step_size_;
  double gamma_;
};

class WsdSchedule : public LrSchedule {
 public:
  WsdSchedule(const ScheduleOptions& o, double base_lr, int64_t max_steps)
      : LrSchedule("wsd", base_lr, max_steps, o.warmup_steps),
        min_lr_ratio_(o.min_lr_ratio),
        decay_steps_(
            std::llround(o.decay_ratio * static_cast<double>(max_steps - o.warmup_steps))) {}
  double lr_at(int64_t step) const override {
    check_step(step);
    if (step < warmup_steps_) return base_lr_ * warmup_factor(step);
    const int64_t decay_start = max_steps_ - decay_steps_;
    if (step < decay_start) return base_lr_;
    const double progress =
        std::min(1.0, static_cast<double>(step - decay_start) /
                          static_cast<double>(std::max<int64_t>(1, decay_steps_)));
    return base_lr_ * std::max(0.0, with_floor(1.0 - progress, min_lr_ratio_));
  }

 private:
  double min_lr_ratio_;
  int64_t decay_steps_;
};

/// torch.optim.lr_scheduler.ReduceLROnPlateau with threshold_mode "rel", cooldown 0, eps 1e-8.
class PlateauSchedule : public LrSchedule {
 public:
  PlateauSchedule(const ScheduleOptions& o, double base_lr, int64_t max_steps)
      : LrSchedule("plateau", base_lr, max_steps, o.warmup_steps),
        maximize_(o.mode == "max"),
        patience_(o.patience),
        factor_(o.factor),
        threshold_(o.threshold),
        min_lr_(o.min_lr_ratio * base_lr),
        current_lr_(base_lr),
        best_(maximize_ ? -std::numeric_limits<double>::infinity()
                        : std::numeric_limits<double>::infinity()) {}

  double lr_at(int64_t step) const override {
    check_step(step);
    return current_lr_ * warmup_factor(step);
  }

  void on_eval(double metric) override {
    if (is_better(metric)) {
      best_ = metric;
      num_bad_evals_ = 0;
    } else {
      ++num_bad_evals_;
    }
    if (num_bad_evals_ > patience_) {
      const double reduced = std::max(current_lr_ * factor_, min_lr_);
      if (current_lr_ - reduced > kEps) {
        log::info(
            "lr schedule: no improvement of the metric for {} evaluations, lr {:.6g} -> {:.6g}",
            num_bad_evals_, current_lr_, reduced);
        current_lr_ = reduced;
      }
      num_bad_evals_ = 0;
    }
  }

  void save(torch::serialize::OutputArchive& archive) const override {
    LrSchedule::save(archive);
    archive.write("current_lr", c10::IValue(current_lr_));
    archive.write("best", c10::IValue(best_));
    archive.write("num_bad_evals", c10::IValue(num_bad_evals_));
  }

  void load(torch::serialize::InputArchive& archive) override {
    LrSchedule::load(archive);
    current_lr_ = read_value(archive, "current_lr").toDouble();
    best_ = read_value(archive, "best").toDouble();
    num_bad_evals_ = read_value(archive, "num_bad_evals").toInt();
  }

 private:
  static constexpr double kEps = 1e-8;  // torch's minimal lr change

  bool is_better(double metric) const {
    // NaN is never better (comparisons are false), as in torch.
    return maximize_ ? metric > best_ * (1.0 + threshold_) : metric < best_ * (1.0 - threshold_);
  }

  bool maximize_;
  int64_t patience_;
  double factor_;
  double threshold_;
  double min_lr_;
  double current_lr_;
  double best_;
  int64_t num_bad_evals_ = 0;
};

void validate(const ScheduleOptions& o, double base_lr, int64_t max_steps) {
  auto fail = [](const std::string& message) { throw ConfigError(message); };
  if (max_steps <= 0) fail(fmt::format("train.max_steps must be > 0, got {}", max_steps));
  // The bounds are the config schema's (core/config_schema.cpp), for options built in code.
  if (!(base_lr > 0.0)) fail(fmt::format("optim.lr must be > 0, got {}", base_lr));
  if (o.warmup_steps < 0 || o.warmup_steps > max_steps) {
    fail(fmt::format("schedule.warmup_steps must be in [0, train.max_steps = {}], got {}",
                     max_steps, o.warmup_steps));
  }
  if (!(o.min_lr_ratio >= 0.0 && o.min_lr_ratio <= 1.0)) {
    fail(fmt::format("schedule.min_lr_ratio must be in [0, 1], got {}", o.min_lr_ratio));
  }
  if (o.name == "step") {
    if (o.step_size < 1) fail(fmt::format("schedule.step_size must be >= 1, got {}", o.step_size));
    if (!(o.gamma > 0.0 && o.gamma <= 1.0))
      fail(fmt::format("schedule.gamma must be in (0, 1], got {}", o.gamma));
  }
  if (o.name == "wsd" && !(o.decay_ratio >= 0.0 && o.decay_ratio <= 1.0)) {
    fail(fmt::format("schedule.decay_ratio must be in [0, 1], got {}", o.decay_ratio));
  }
  if (o.name == "plateau") {
    if (o.mode != "min" && o.mode != "max") {
      fail("schedule.mode must be min or max, got '" + o.mode + "'");
    }
    if (o.patience < 0) fail(fmt::format("schedule.patience must be >= 0, got {}", o.patience));
    if (!(o.factor > 0.0 && o.factor < 1.0)) {
      fail(fmt::format("schedule.factor must be in (0, 1), got {}", o.factor));
    }
    if (!(o.threshold >= 0.0)) {
      fail(fmt::format("schedule.threshold must be >= 0, got {}", o.threshold));
    }
  }
}

}  // namespace
}  // namespace detail

LrSchedule::LrSchedule(std::string name, double base_lr, int64_t max_steps, int64_t warmup_steps)
    : name_(std::move(name)),
      base_lr_(base_lr),
      max_steps_(max_steps),
      warmup_steps_(warmup_steps) {}

void LrSchedule::on_eval(double /*metric*/) {}

double LrSchedule::warmup_factor(int64_t step) const {
  if (step >= warmup_steps_) return 1.0;
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps_));
}

void LrSchedule::check_step(int64_t step) const {
  if (step < 0) {
    throw Error(fmt::format("LrSchedule({})::lr_at: step must be >= 0, got {}", name_, step));
  }
}

void LrSchedule::save(torch::serialize::OutputArchive& archive) const {
  archive.write("name", c10::IValue(name_));
  archive.write("base_lr", c10::IValue(base_lr_));
  archive.write("max_steps", c10::IValue(max_steps_));
}

void LrSchedule::load(torch::serialize::InputArchive& archive) {
  const std::string saved_name = detail::read_value(archive, "name").toStringRef();
  if (saved_name != name_) {
    throw CheckpointError("LrSchedule::load: the checkpoint holds a '" + saved_name +
                          "' schedule, the configuration asks for '" + name_ + "'");
  }
  const double saved_lr = detail::read_value(archive, "base_lr").toDouble();
  const int64_t saved_steps = detail::read_value(archive, "max_steps").toInt();
  if (saved_lr != base_lr_ || saved_steps != max_steps_) {
    log::warn(
        "lr schedule: checkpoint had base lr {} and max_steps {}, continuing with the configured "
        "{} and {}",
        saved_lr, saved_steps, base_lr_, max_steps_);
  }
}

std::unique_ptr<LrSchedule> make_lr_schedule(const ScheduleOptions& options, double base_lr,
                                             int64_t max_steps) {
  detail::validate(options, base_lr, max_steps);
  const std::string& n = options.name;
  if (n == "constant")
    return std::make_unique<detail::ConstantSchedule>(options, base_lr, max_steps);
  if (n == "cosine") return std::make_unique<detail::CosineSchedule>(options, base_lr, max_steps);
  if (n == "linear") return std::make_unique<detail::LinearSchedule>(options, base_lr, max_steps);
  if (n == "step") return std::make_unique<detail::StepSchedule>(options, base_lr, max_steps);
  if (n == "wsd") return std::make_unique<detail::WsdSchedule>(options, base_lr, max_steps);
  if (n == "plateau") return std::make_unique<detail::PlateauSchedule>(options, base_lr, max_steps);
  throw ConfigError("schedule.name: unknown schedule '" + n +
                    "' (expected constant, cosine, linear, step, wsd or plateau)");
}

}  // namespace brrr
