#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <string>

#include "trainer/sync_counter.h"

namespace brrr {
namespace {

std::atomic<int64_t> g_syncs{0};

// Counts c10's "called a synchronizing CUDA operation" warnings; forwards every other warning.
class CountingHandler : public c10::WarningHandler {
 public:
  explicit CountingHandler(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchronizing CUDA operation") != std::string::npos) {
      g_syncs.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (next_ != nullptr) next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

}  // namespace

SyncCounter::SyncCounter() = default;

SyncCounter::~SyncCounter() { arm(false); }

void SyncCounter::arm(bool on) {
  static CountingHandler handler(c10::WarningUtils::get_warning_handler());
  if (on) {
    c10::WarningUtils::set_warning_handler(&handler);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  } else {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
}

int64_t SyncCounter::take() { return g_syncs.exchange(0); }

}  // namespace brrr
