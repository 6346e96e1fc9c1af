#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <string>
#include <string_view>

#include "trainer/observe/sync_counter.h"

namespace brrr {
namespace {

std::atomic<int64_t> g_syncs{0};  // since the last take()
std::atomic<int64_t> g_seen{0};   // ever

// Whether `warning` is c10's sync-debug report. It is recognised by where it comes from, the
// function c10::cuda::warn_or_error_on_sync (a public C10_CUDA_API function that every
// synchronising CUDA call of c10 and ATen goes through), rather than by the wording of its
// message. libtorch has no sturdier C++ hook: its GPUTrace callbacks need a Python interpreter,
// and a CUPTI subscription would collide with the Kineto profiler's.
bool is_sync_report(const c10::Warning& warning) {
  const char* function = warning.source_location().function;
  if (function != nullptr &&
      std::string_view(function).find("warn_or_error_on_sync") != std::string_view::npos) {
    return true;
  }
  return warning.msg().find("synchronizing CUDA operation") != std::string::npos;  // older c10
}

// Counts c10's sync-debug warnings; forwards every other warning.
class CountingHandler : public c10::WarningHandler {
 public:
  explicit CountingHandler(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (is_sync_report(warning)) {
      g_syncs.fetch_add(1, std::memory_order_relaxed);
      g_seen.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (next_ != nullptr) next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

}  // namespace

SyncCounter::SyncCounter() = default;

SyncCounter::~SyncCounter() {
  arm(false);
}

void SyncCounter::arm(bool on) {
  static CountingHandler handler(c10::WarningUtils::get_warning_handler());
  if (on) {
    c10::WarningUtils::set_warning_handler(&handler);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  } else {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
}

int64_t SyncCounter::take() {
  return g_syncs.exchange(0);
}

int64_t SyncCounter::seen() {
  return g_seen.load();
}

}  // namespace brrr
