#pragma once
// An exclusive lock on a run directory, so that two trainers never write the same run. It is a
// flock(2) on `<run_dir>/.lock`: the kernel releases it when the holder exits or dies, so a crash
// never leaves a stale lock. The file holds the holder's pid, for the message of the one refused.
// Forked children (loader workers) do not keep it: their copy of the descriptor is closed at fork.
#include <string>

namespace brrr {

class RunDirLock {
 public:
  /// Takes the lock (creating `run_dir` if needed). Throws RunDirError naming the directory and
  /// the pid of the process that holds it, or Error when the lock file cannot be made.
  explicit RunDirLock(const std::string& run_dir);
  /// Releases the lock (the file stays: removing it would race with the next locker).
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  /// The name of the lock file inside a run directory.
  static constexpr const char* kFileName = ".lock";

 private:
  int fd_ = -1;
};

}  // namespace brrr
