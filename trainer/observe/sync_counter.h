#pragma once
// Counts host-device synchronisations made while it is armed, by any code (the trainer, a user's
// training_step calling loss.item(), ...). On CUDA it uses c10's sync debug mode, which reports
// every synchronising CUDA call as a warning from c10::cuda::warn_or_error_on_sync, and a warning
// handler that counts the warnings of that function. On CPU there
// is no device to sync with and the count stays 0.
#include <cstdint>

namespace brrr {

class SyncCounter {
 public:
  SyncCounter();
  ~SyncCounter();
  SyncCounter(const SyncCounter&) = delete;
  SyncCounter& operator=(const SyncCounter&) = delete;

  /// Arms (true) or disarms counting; logging steps disarm it around their own deliberate reads.
  void arm(bool on);
  /// Syncs counted since the last take(); resets the count.
  int64_t take();
  /// Syncs counted by any SyncCounter of the process so far (never reset): a component compares
  /// two readings to tell whether its own code synced, e.g. during a CUDA-graph capture.
  static int64_t seen();
};

}  // namespace brrr
