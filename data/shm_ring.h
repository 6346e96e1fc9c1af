#pragma once
// ShmRing: the batch slots shared by the trainer process and its forked workers.
//
// One anonymous MAP_SHARED mapping made before fork: children inherit it, no /dev/shm name ever
// exists, so nothing can leak even when every process is SIGKILLed. Optionally page-locked once
// (cudaHostRegister) so host-to-device copies from a slot are DMA.
//
// Ownership of a slot: free -> acquired by the loader (a worker is filling it, or it waits to be
// handed out) -> leased to the consumer (batch tensors view it) -> free again when the last copy of
// the lease token dies. The mapping itself lives until the ring AND every lease are gone, so
// tensors that outlive the DataLoader stay valid. The free list is thread-safe (tensor deleters
// may run on any thread); the mapping is only ever used from the parent's side of the free list.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace brrr {

class ShmRing {
 public:
  /// `num_slots` slots of `slot_bytes` bytes (a multiple of the page size), page-locked when
  /// `pin` (throws brrr::Error when pinning is impossible). Throws Error if mmap fails.
  ShmRing(int64_t num_slots, size_t slot_bytes, bool pin);
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;
  ~ShmRing();

  int64_t num_slots() const;
  size_t slot_bytes() const;
  /// Whether the mapping is page-locked for CUDA.
  bool pinned() const;
  /// Start of slot `slot` (in [0, num_slots)).
  void* slot(int64_t slot) const;

  /// Takes a free slot, or nullopt when none is free.
  std::optional<int64_t> acquire();
  /// Returns a slot held by the loader (never one that is leased) to the free list.
  void release(int64_t slot);
  /// Moves an acquired slot to the consumer: it returns to the free list when the last copy of
  /// the returned token is destroyed, on any thread. The token also keeps the mapping alive.
  std::shared_ptr<void> lease(int64_t slot);
  /// Slots currently free.
  int64_t free_slots() const;

 private:
  struct Region;
  std::shared_ptr<Region> region_;
};

}  // namespace brrr
