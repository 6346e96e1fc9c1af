#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <string_view>

#include "core/error.h"

namespace brrr::log {
namespace {

Level initial_level() {
  const char* env = std::getenv("BRRR_LOG_LEVEL");
  if (env == nullptr) return Level::kInfo;
  try {
    return parse_level(env);
  } catch (const Error&) {
    return Level::kInfo;
  }
}

std::atomic<Level>& current() {
  static std::atomic<Level> level{initial_level()};
  return level;
}

std::mutex& write_mutex() {
  static std::mutex m;
  return m;
}

constexpr std::string_view kEraseToEnd = "\033[K";

// The live line now on screen ("" = none). Guarded by write_mutex().
std::string& live_line() {
  static std::string line;
  return line;
}

void put(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
}

// Back to column 0 and erase the line. Caller holds write_mutex().
void erase_line() {
  put("\r");
  put(kEraseToEnd);
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug:
      return "DEBUG";
    case Level::kInfo:
      return "INFO ";
    case Level::kWarn:
      return "WARN ";
    case Level::kError:
      return "ERROR";
    default:
      return "";
  }
}

}  // namespace

void set_level(Level level) {
  current().store(level);
}
Level level() {
  return current().load(std::memory_order_relaxed);
}

Level parse_level(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  throw ConfigError(
      fmt::format("unknown log level '{}' (expected debug, info, warn, error or off)", name));
}

void write(Level lvl, std::string_view message) {
  using clock = std::chrono::system_clock;
  const auto now = clock::now();
  const std::time_t secs = clock::to_time_t(now);
  const int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
  const std::string line =
      fmt::format("{}.{:03d} {} {}\n", stamp, millis, level_name(lvl), message);
  std::lock_guard<std::mutex> lock(write_mutex());
  const std::string& live = live_line();
  if (!live.empty()) erase_line();  // erase, write, redraw
  put(line);
  if (!live.empty()) {
    put(live);
    put(kEraseToEnd);
  }
  std::fflush(stderr);
}

void write_raw(std::string_view text) {
  std::lock_guard<std::mutex> lock(write_mutex());
  put(text);
  std::fflush(stderr);
}

void set_live_line(std::string_view text) {
  std::lock_guard<std::mutex> lock(write_mutex());
  live_line() = text;
  put("\r");
  put(text);
  put(kEraseToEnd);
  std::fflush(stderr);
}

void clear_live_line() {
  std::lock_guard<std::mutex> lock(write_mutex());
  if (live_line().empty()) return;
  live_line().clear();
  erase_line();
  std::fflush(stderr);
}

void end_live_line() {
  std::lock_guard<std::mutex> lock(write_mutex());
  if (live_line().empty()) return;
  live_line().clear();
  put("\n");
  std::fflush(stderr);
}

}  // namespace brrr::log
