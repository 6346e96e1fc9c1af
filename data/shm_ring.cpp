#include "data/shm_ring.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/host_memory.h"

namespace brrr {

// The mapping and its free list; shared by the ring and every outstanding lease.
struct ShmRing::Region {
  void* base = nullptr;
  size_t bytes = 0;
  int64_t num_slots = 0;
  size_t slot_bytes = 0;
  bool pinned = false;
  mutable std::mutex mu;
  std::vector<int64_t> free;  // guarded by mu; LIFO so a hot slot is reused

  ~Region() {
    if (pinned) detail::unpin_host_memory(base);  // unregister before the pages go away
    if (base != nullptr && munmap(base, bytes) != 0) {
      log::error("munmap of the batch ring ({} bytes) failed: {}", bytes, std::strerror(errno));
    }
  }

  void check_slot(int64_t slot) const {
    if (slot < 0 || slot >= num_slots) {
      throw Error(fmt::format("batch ring: slot {} outside [0, {})", slot, num_slots));
    }
  }

  void put_back(int64_t slot) {
    std::lock_guard<std::mutex> lock(mu);
    free.push_back(slot);
  }
};

ShmRing::ShmRing(int64_t num_slots, size_t slot_bytes, bool pin) : region_(new Region) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (num_slots < 1 || slot_bytes == 0 || slot_bytes % page != 0) {
    throw Error(
        fmt::format("batch ring: need >= 1 slot of a positive multiple of {} bytes, got {} "
                    "slots of {} bytes",
                    page, num_slots, slot_bytes));
  }
  Region& r = *region_;
  r.num_slots = num_slots;
  r.slot_bytes = slot_bytes;
  r.bytes = slot_bytes * static_cast<size_t>(num_slots);
  void* p = mmap(nullptr, r.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error(fmt::format("batch ring: mmap of {} slots x {} bytes failed: {}", num_slots,
                            slot_bytes, std::strerror(errno)));
  }
  r.base = p;
  if (pin) {
    detail::pin_host_memory(r.base, r.bytes);  // on failure ~Region unmaps
    r.pinned = true;
  }
  for (int64_t s = num_slots - 1; s >= 0; --s) r.free.push_back(s);
}

ShmRing::~ShmRing() = default;

int64_t ShmRing::num_slots() const {
  return region_->num_slots;
}
size_t ShmRing::slot_bytes() const {
  return region_->slot_bytes;
}
bool ShmRing::pinned() const {
  return region_->pinned;
}

void* ShmRing::slot(int64_t slot) const {
  region_->check_slot(slot);
  return static_cast<char*>(region_->base) + region_->slot_bytes * static_cast<size_t>(slot);
}

std::optional<int64_t> ShmRing::acquire() {
  std::lock_guard<std::mutex> lock(region_->mu);
  if (region_->free.empty()) return std::nullopt;
  const int64_t s = region_->free.back();
  region_->free.pop_back();
  return s;
}

void ShmRing::release(int64_t slot) {
  region_->check_slot(slot);
  region_->put_back(slot);
}

std::shared_ptr<void> ShmRing::lease(int64_t slot) {
  region_->check_slot(slot);
  std::shared_ptr<Region> region = region_;
  // The token's deleter returns the slot; it holds the region, so the mapping outlives the ring.
  return std::shared_ptr<void>(this->slot(slot), [region, slot](void*) { region->put_back(slot); });
}

int64_t ShmRing::free_slots() const {
  std::lock_guard<std::mutex> lock(region_->mu);
  return static_cast<int64_t>(region_->free.size());
}

}  // namespace brrr
