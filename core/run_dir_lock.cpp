#include "core/run_dir_lock.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "core/error.h"

namespace brrr {

namespace fs = std::filesystem;

namespace {

// The descriptors of the locks this process holds. A forked child (a loader worker) inherits
// them, and a flock lives while any descriptor of it is open: a worker that outlives its trainer
// object (or hangs) would keep the run locked. The fork handler closes them in every child.
// A slot holds fd + 1; 0 (static zero-initialisation) is free.
constexpr int kMaxLocks = 64;
std::atomic<int> g_lock_slots[kMaxLocks];

void close_locks_in_child() {
  for (auto& slot : g_lock_slots) {
    const int held = slot.exchange(0);
    if (held > 0) ::close(held - 1);
  }
}

void remember(int fd) {
  static std::once_flag handler;
  std::call_once(handler, [] { ::pthread_atfork(nullptr, nullptr, close_locks_in_child); });
  for (auto& slot : g_lock_slots) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, fd + 1)) return;
  }
  // More than kMaxLocks locks at once: this one stays open in children (still correct; only
  // released later if a child outlives the lock).
}

void forget(int fd) {
  for (auto& slot : g_lock_slots) {
    int expected = fd + 1;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

}  // namespace

RunDirLock::RunDirLock(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw Error(fmt::format("cannot create run directory '{}': {}", run_dir, ec.message()));
  const std::string path = (fs::path(run_dir) / kFileName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char text[32] = {};
    const ssize_t n = ::pread(fd_, text, sizeof(text) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      throw Error(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
    }
    const std::string holder = n > 0 ? std::string(text, static_cast<size_t>(n)) : "";
    throw RunDirError(fmt::format(
        "run directory '{}' is in use by another trainer (pid {}); wait for it to end, stop it, "
        "or choose another run.name",
        run_dir, holder.empty() ? "unknown" : holder.substr(0, holder.find('\n'))));
  }
  remember(fd_);
  const std::string pid = fmt::format("{}\n", ::getpid());
  // If this fails the lock still holds; only the pid shown to a refused trainer is missing.
  const bool wrote = ::ftruncate(fd_, 0) == 0 &&
                     ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  (void)wrote;
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  forget(fd_);
  ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace brrr
