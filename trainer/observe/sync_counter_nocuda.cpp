#include "trainer/observe/sync_counter.h"

namespace brrr {

SyncCounter::SyncCounter() = default;
SyncCounter::~SyncCounter() = default;
void SyncCounter::arm(bool /*on*/) {}
int64_t SyncCounter::take() {
  return 0;
}
int64_t SyncCounter::seen() {
  return 0;
}

}  // namespace brrr
