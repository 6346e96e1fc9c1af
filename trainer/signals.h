#pragma once
// Graceful stop on SIGINT/SIGTERM. The first signal only sets a flag: the trainer finishes the
// current step, writes a checkpoint and returns. A second signal exits at once (_exit), which is
// safe because checkpoints are written atomically (temp file + rename) and loader workers die with
// their parent (PR_SET_PDEATHSIG).
namespace brrr {

class StopSignalGuard {
 public:
  /// Installs the handlers; the previous ones are restored by the destructor.
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  /// The signal received (SIGINT, SIGTERM), or 0.
  static int pending();
  /// Clears the flag (tests).
  static void reset();
};

}  // namespace brrr
