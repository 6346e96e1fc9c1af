#pragma once
// Collate: the fixed layout of one batch inside a shared-memory slot, and the one function that
// loads a batch's samples and stacks them into a slot (used by worker processes and by
// num_workers = 0 alike, so both produce bit-identical batches).
//
// Invariant: a slot holds, for each key (in key order), batch_size rows of one sample's bytes,
// contiguous and starting at a 64-byte aligned offset; slot_bytes() is a multiple of 4096 so every
// slot of a ring starts on a page. A batch of `rows` < batch_size rows is the first `rows` rows.
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace brrr {

/// Where one key of the samples lives inside a batch slot.
struct FieldLayout {
  std::string key;
  at::ScalarType dtype;
  /// Shape of one sample's tensor (the batch tensor is (rows, shape...)).
  std::vector<int64_t> shape;
  /// Bytes of one sample's tensor (one row).
  size_t sample_bytes = 0;
  /// Byte offset of row 0 from the start of the slot.
  size_t offset = 0;
};

/// The slot layout of batches of `batch_size` samples shaped like a spec sample.
class BatchLayout {
 public:
  /// Byte alignment of each field inside a slot.
  static constexpr size_t kFieldAlignment = 64;
  /// Slot sizes are rounded up to this (a page), so slots start page-aligned.
  static constexpr size_t kSlotAlignment = 4096;

  /// Keys, dtypes and shapes from `spec` (usually dataset.get(0)); throws DataError if the spec is
  /// empty or holds a non-CPU or undefined tensor, ConfigError if batch_size < 1.
  BatchLayout(const Sample& spec, int64_t batch_size);

  int64_t batch_size() const { return batch_size_; }
  /// Bytes of one slot (all fields, batch_size rows), a multiple of kSlotAlignment.
  size_t slot_bytes() const { return slot_bytes_; }
  const std::vector<FieldLayout>& fields() const { return fields_; }

  /// Throws DataError naming the sample index, key, expected and actual dtype/shape when `sample`
  /// (dataset index `index`) does not match the spec (missing, extra, or different tensors).
  void check(const Sample& sample, int64_t index) const;

  /// Checks `sample` and copies it into row `row` of the slot starting at `slot`.
  void write(const Sample& sample, int64_t index, int64_t row, void* slot) const;

  /// Tensors viewing the first `rows` rows of the slot at `slot` (no copy). Each tensor's deleter
  /// holds a copy of `owner`, so the slot stays reserved until the last tensor is freed.
  Batch view(void* slot, int64_t rows, const std::shared_ptr<void>& owner) const;

  /// e.g. "image uint8 [3, 32, 32], label int64 []".
  std::string describe() const;

 private:
  int64_t batch_size_;
  size_t slot_bytes_ = 0;
  std::vector<FieldLayout> fields_;  // sorted by key (as std::map iterates)
};

/// Loads samples `indices[0..count)` of `dataset` and stacks them into the slot at `slot`, sample i
/// drawn with Rng(mix_seed(seed, epoch, indices[i])). `*current_index` is set to the dataset index
/// being loaded before each get(), so a caller catching an exception knows which sample failed.
void collate_into(const Dataset& dataset, const BatchLayout& layout, uint64_t seed, int64_t epoch,
                  const int64_t* indices, int64_t count, void* slot, int64_t* current_index);

}  // namespace brrr
