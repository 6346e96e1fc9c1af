#pragma once
// The console progress line:
//   step 120/1000 | loss 0.4123 | lr 3.0e-04 | 5,120 samples/s | data-wait 3% | ETA 2m14s
// On a terminal it is redrawn in place ('\r' + text + erase-to-end-of-line) and erased before any
// log line written through ProgressLine::log(); elsewhere (files, CI) each update is a plain
// log::info line. The text formatting is pure functions, tested on their own.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/log.h"

namespace brrr {

/// "45s", "2m14s", "1h02m", "3d04h"; "?" for negative or non-finite input. Rounds to seconds.
std::string format_duration(double seconds);
/// Rounded to an integer with thousands separators: 5120.4 -> "5,120", -1234567 -> "-1,234,567".
std::string format_thousands(double value);
/// Learning rate in scientific notation with one decimal: 3e-4 -> "3.0e-04".
std::string format_lr(double lr);

/// Values shown on the line; absent ones are left out.
struct ProgressStats {
  /// Optimizer steps completed.
  int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> lr;
  std::optional<double> samples_per_s;
  /// Language models: tokens per second, shown after samples/s.
  std::optional<double> tokens_per_s;
  /// Share of step time spent waiting for the data loader, in percent.
  std::optional<double> data_wait_pct;
};

/// The line's text for `stats` out of `max_steps` (0 = unknown total) with an ETA in seconds.
std::string format_progress_line(const ProgressStats& stats, int64_t max_steps,
                                 std::optional<double> eta_s);

enum class ProgressMode {
  kAuto,      ///< kTerminal when stderr is a terminal, else kPlain
  kTerminal,  ///< redraw in place
  kPlain,     ///< one log::info line per update
};

struct ProgressOptions {
  /// Total optimizer steps of the run (for "step N/M" and the ETA); 0 = unknown.
  int64_t max_steps = 0;
  /// Step the run starts (or resumes) from; the ETA measures only steps taken by this process.
  int64_t start_step = 0;
  ProgressMode mode = ProgressMode::kAuto;
  /// Terminal columns the line may use; 0 = ask the terminal (80 if it does not say). The line is
  /// cut to fit, since a wrapped line cannot be redrawn with '\r'.
  int64_t width = 0;
};

/// Thread-safe. Destruction erases a line still shown (e.g. while an exception unwinds).
class ProgressLine {
 public:
  explicit ProgressLine(ProgressOptions options);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  /// Shows `stats` (redraw, or a log line in plain mode) and updates the ETA estimate.
  void update(const ProgressStats& stats);
  /// Writes a normal log line (the logger erases and redraws the live line around it; a direct
  /// log::info from anywhere does the same).
  void log(log::Level level, std::string_view message);
  /// Erases the live line (no-op in plain mode or when nothing is shown).
  void clear();
  /// Leaves the last line on screen and moves to a new line (end of training).
  void finish();

  bool is_terminal() const { return terminal_; }
  /// The text of the last update (for tests and the final summary).
  std::string last_text() const;

 private:
  // Seconds remaining, from a smoothed seconds-per-step; nullopt before the first measured step.
  std::optional<double> estimate_eta(int64_t step);
  // text_ cut to the terminal width. Caller holds mutex_.
  std::string fitted_text() const;

  ProgressOptions options_;
  bool terminal_ = false;
  size_t width_ = 80;
  mutable std::mutex mutex_;
  std::string text_;  // last formatted line
  std::chrono::steady_clock::time_point last_time_;
  int64_t last_step_ = 0;
  std::optional<double> secs_per_step_;  // exponential moving average
};

}  // namespace brrr
