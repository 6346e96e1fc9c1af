#include "data/collate.h"

#include <ATen/ATen.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {
namespace {

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

std::string shape_str(at::IntArrayRef shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string keys_of(const std::vector<FieldLayout>& fields) {
  std::vector<std::string> keys;
  for (const auto& f : fields) keys.push_back(f.key);
  return fmt::format("{}", fmt::join(keys, ", "));
}

}  // namespace

BatchLayout::BatchLayout(const Sample& spec, int64_t batch_size) : batch_size_(batch_size) {
  if (batch_size < 1) {
    throw ConfigError(fmt::format("BatchLayout: batch_size must be >= 1, got {}", batch_size));
  }
  if (spec.empty()) throw DataError("BatchLayout: the spec sample has no tensors");
  size_t offset = 0;
  for (const auto& [key, t] : spec) {
    if (!t.defined()) throw DataError(fmt::format("BatchLayout: key '{}' holds no tensor", key));
    if (!t.device().is_cpu()) {
      throw DataError(
          fmt::format("BatchLayout: key '{}' is on {}; datasets must return CPU tensors", key,
                      t.device().str()));
    }
    FieldLayout f;
    f.key = key;
    f.dtype = t.scalar_type();
    f.shape = t.sizes().vec();
    f.sample_bytes = static_cast<size_t>(t.numel()) * t.element_size();
    f.offset = offset;
    offset = round_up(offset + f.sample_bytes * static_cast<size_t>(batch_size), kFieldAlignment);
    fields_.push_back(std::move(f));
  }
  slot_bytes_ = round_up(std::max<size_t>(offset, 1), kSlotAlignment);
}

void BatchLayout::check(const Sample& sample, int64_t index) const {
  for (const auto& f : fields_) {
    auto it = sample.find(f.key);
    if (it == sample.end()) {
      throw DataError(fmt::format("sample {} has no key '{}' (keys of the first sample: {})", index,
                                  f.key, keys_of(fields_)));
    }
    const at::Tensor& t = it->second;
    if (!t.defined() || !t.device().is_cpu()) {
      throw DataError(fmt::format("sample {} key '{}': expected a CPU tensor", index, f.key));
    }
    if (t.scalar_type() != f.dtype) {
      throw DataError(fmt::format("sample {} key '{}': dtype {}, expected {} (as the first sample)",
                                  index, f.key, c10::toString(t.scalar_type()),
                                  c10::toString(f.dtype)));
    }
    if (t.sizes() != at::IntArrayRef(f.shape)) {
      throw DataError(fmt::format("sample {} key '{}': shape {}, expected {} (as the first sample)",
                                  index, f.key, shape_str(t.sizes()), shape_str(f.shape)));
    }
  }
  if (sample.size() != fields_.size()) {
    for (const auto& [key, t] : sample) {
      bool known = false;
      for (const auto& f : fields_) known = known || f.key == key;
      if (!known) {
        throw DataError(
            fmt::format("sample {} has an extra key '{}' (keys of the first sample: {})", index,
                        key, keys_of(fields_)));
      }
    }
  }
}

void BatchLayout::write(const Sample& sample, int64_t index, int64_t row, void* slot) const {
  check(sample, index);
  if (row < 0 || row >= batch_size_) {
    throw Error(fmt::format("BatchLayout::write: row {} outside [0, {})", row, batch_size_));
  }
  auto* base = static_cast<char*>(slot);
  for (const auto& f : fields_) {
    void* dst = base + f.offset + f.sample_bytes * static_cast<size_t>(row);
    // copy_ handles non-contiguous sources; dtype and shape were checked above.
    at::from_blob(dst, f.shape, at::TensorOptions().dtype(f.dtype)).copy_(sample.at(f.key));
  }
}

Batch BatchLayout::view(void* slot, int64_t rows, const std::shared_ptr<void>& owner) const {
  if (rows < 1 || rows > batch_size_) {
    throw Error(fmt::format("BatchLayout::view: rows {} outside [1, {}]", rows, batch_size_));
  }
  Batch batch;
  auto* base = static_cast<char*>(slot);
  for (const auto& f : fields_) {
    std::vector<int64_t> sizes{rows};
    sizes.insert(sizes.end(), f.shape.begin(), f.shape.end());
    batch[f.key] = at::from_blob(
        base + f.offset, sizes, [owner](void*) {}, at::TensorOptions().dtype(f.dtype));
  }
  return batch;
}

std::string BatchLayout::describe() const {
  std::vector<std::string> parts;
  for (const auto& f : fields_) {
    parts.push_back(fmt::format("{} {} {}", f.key, c10::toString(f.dtype), shape_str(f.shape)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

void collate_into(const Dataset& dataset, const BatchLayout& layout, uint64_t seed, int64_t epoch,
                  const int64_t* indices, int64_t count, void* slot, int64_t* current_index) {
  if (count < 1 || count > layout.batch_size()) {
    throw Error(
        fmt::format("collate_into: {} samples for a batch of {}", count, layout.batch_size()));
  }
  for (int64_t row = 0; row < count; ++row) {
    const int64_t index = indices[row];
    *current_index = index;
    Rng rng(mix_seed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
    layout.write(dataset.get(index, rng), index, row, slot);
  }
}

}  // namespace brrr
