#pragma once
// The one place that turns the `data:` options into DataLoaderOptions, for the training loader,
// the evaluation loader and the auto-tuner's trial loaders alike, so they cannot drift apart.
#include <c10/core/Device.h>

#include <cstdint>

#include "core/config.h"
#include "data/data_loader.h"

namespace brrr {

/// Which loader of a run.
enum class LoaderRole {
  kTrain,  ///< data.shuffle and data.drop_last; workers persistent as data.persistent_workers
  kEval,   ///< data.val: sequential, every example (no drop_last), persistent workers
};

/// Where the loader's batches go and which part of the data is this process's.
struct LoaderPlacement {
  c10::Device device = c10::Device(c10::kCPU);
  /// run.seed: sample order and every sample's augmentation RNG.
  int64_t seed = 0;
  /// This process's rank among world_size data-parallel ranks (a disjoint shard each).
  int64_t rank = 0;
  int64_t world_size = 1;
};

/// The loader options of `role` from `data` (its worker count, pinning, prefetch and timeout
/// for both roles; batch size data.batch_size or data.val.batch_size). Pinning only takes effect
/// with a CUDA device; data.num_workers must be resolved (not `auto`).
DataLoaderOptions make_loader_options(const DataOptions& data, LoaderRole role,
                                      const LoaderPlacement& placement);

}  // namespace brrr
