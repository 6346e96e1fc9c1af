#include "trainer/observe/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace brrr {
namespace {

// Weight of the newest measurement in the seconds-per-step average: recent enough to follow a
// change of pace (eval, throttling), smooth enough that the ETA does not jump on every update.
constexpr double kEtaSmoothing = 0.3;

size_t terminal_columns() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02d}h", s / 86400, (s % 86400) / 3600);
}

std::string format_thousands(double value) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  const double rounded = std::round(value);
  const std::string digits = fmt::format("{:.0f}", std::fabs(rounded));
  std::string out = rounded < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string format_lr(double lr) {
  return fmt::format("{:.1e}", lr);
}

std::string format_progress_line(const ProgressStats& stats, int64_t max_steps,
                                 std::optional<double> eta_s) {
  std::string line = max_steps > 0 ? fmt::format("step {}/{}", stats.step, max_steps)
                                   : fmt::format("step {}", stats.step);
  if (stats.loss) line += fmt::format(" | loss {:.4f}", *stats.loss);
  if (stats.lr) line += " | lr " + format_lr(*stats.lr);
  if (stats.samples_per_s) line += " | " + format_thousands(*stats.samples_per_s) + " samples/s";
  if (stats.tokens_per_s) line += " | " + format_thousands(*stats.tokens_per_s) + " tokens/s";
  if (stats.data_wait_pct) line += fmt::format(" | data-wait {:.0f}%", *stats.data_wait_pct);
  if (eta_s) line += " | ETA " + format_duration(*eta_s);
  return line;
}

ProgressLine::ProgressLine(ProgressOptions options)
    : options_(options),
      last_time_(std::chrono::steady_clock::now()),
      last_step_(options.start_step) {
  switch (options_.mode) {
    case ProgressMode::kTerminal:
      terminal_ = true;
      break;
    case ProgressMode::kPlain:
      terminal_ = false;
      break;
    case ProgressMode::kAuto:
      terminal_ = isatty(STDERR_FILENO) == 1;
      break;
  }
  if (options_.width > 0) {
    width_ = static_cast<size_t>(options_.width);
  } else if (terminal_) {
    width_ = terminal_columns();
  }
}

ProgressLine::~ProgressLine() {
  clear();
}

std::optional<double> ProgressLine::estimate_eta(int64_t step) {
  const auto now = std::chrono::steady_clock::now();
  if (step > last_step_) {
    const double per_step = std::chrono::duration<double>(now - last_time_).count() /
                            static_cast<double>(step - last_step_);
    secs_per_step_ = secs_per_step_
                         ? kEtaSmoothing * per_step + (1 - kEtaSmoothing) * *secs_per_step_
                         : per_step;
    last_time_ = now;
    last_step_ = step;
  }
  if (!secs_per_step_ || options_.max_steps <= 0) return std::nullopt;
  return *secs_per_step_ * static_cast<double>(std::max<int64_t>(options_.max_steps - step, 0));
}

void ProgressLine::update(const ProgressStats& stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  text_ = format_progress_line(stats, options_.max_steps, estimate_eta(stats.step));
  if (!terminal_) {
    log::info("{}", text_);
    return;
  }
  log::set_live_line(fitted_text());
}

void ProgressLine::log(log::Level level, std::string_view message) {
  // The logger erases and redraws the live line around every line it writes.
  if (log::level() <= level) log::write(level, message);
}

void ProgressLine::clear() {
  log::clear_live_line();
}  // no-op when nothing is shown

void ProgressLine::finish() {
  log::end_live_line();
}

std::string ProgressLine::fitted_text() const {
  // One column short of the width: writing the last column makes some terminals wrap, and a
  // wrapped line can no longer be erased with '\r'.
  return text_.size() >= width_ ? text_.substr(0, width_ - 1) : text_;
}

std::string ProgressLine::last_text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return text_;
}

}  // namespace brrr
