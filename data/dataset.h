#pragma once
// The Dataset interface: size() + get(index). Datasets are composed by wrappers (subset, ...)
// and loaded by DataLoader, in the trainer process or in forked worker processes.
//
// Invariants a Dataset must keep:
//  * get() is a pure function of (index, rng): all randomness comes from `rng`, which the loader
//    seeds from (seed, epoch, index). Same inputs => bit-identical sample, in any process.
//  * Every sample has the same keys, dtypes and shapes (they are stacked into fixed-size batch
//    slots). Images are uint8 (C, H, W); labels int64 scalars; token windows int64 (T,).
//  * get() touches no CUDA state and may run in a forked child: CPU tensors only.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/rng.h"

namespace brrr {

/// One example: named CPU tensors, e.g. {"image": uint8 (C,H,W), "label": int64 ()}.
using Sample = std::map<std::string, at::Tensor>;
/// A batch: the same keys with a leading batch dimension, e.g. {"image": (B,C,H,W), "label": (B,)}.
using Batch = std::map<std::string, at::Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// Loads example `index` in [0, size()). Throws brrr::DataError naming the index/file on bad
  /// data.
  virtual Sample get(int64_t index, Rng& rng) const = 0;
  /// One line for logs and --dry-run, e.g. "image_folder /data/photos: 6000 images, 12 classes".
  virtual std::string describe() const = 0;
  /// The largest class id (classification) or token id (language modelling) in the data, when
  /// the dataset knows it cheaply: the trainer checks it against model.num_classes /
  /// model.vocab_size once, before training. nullopt: unknown (not checked).
  virtual std::optional<int64_t> max_target_id() const { return std::nullopt; }
};

using DatasetPtr = std::shared_ptr<const Dataset>;

}  // namespace brrr
