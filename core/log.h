#pragma once
// Process-wide logger: every line brrr prints goes through here ("2026-11-29 12:00:00.123 INFO
// msg"). Thread-safe (one mutex around each line). Library code never writes to stdout/stderr
// directly.
#include <fmt/format.h>

#include <string>
#include <string_view>

namespace brrr::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

/// Lines below `level` are dropped. Default kInfo; BRRR_LOG_LEVEL=debug|info|warn|error|off
/// overrides.
void set_level(Level level);
Level level();
/// Parses "debug", "info", "warn", "error", "off"; throws brrr::ConfigError otherwise.
Level parse_level(std::string_view name);

/// Writes one finished line (a timestamp and the level are prepended) to stderr.
void write(Level level, std::string_view message);

/// Writes raw text to stderr without a newline or prefix.
void write_raw(std::string_view text);

/// The live line (a progress line on a terminal): drawn at the bottom with '\r' and redrawn after
/// every write(), so a log line from anywhere (another thread included) never tears it.
/// set_live_line draws or replaces it; clear_live_line erases it; end_live_line leaves it on screen
/// and moves to a new line. All three are no-ops on an empty live line where that makes sense.
void set_live_line(std::string_view text);
void clear_live_line();
void end_live_line();

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kError) write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace brrr::log
