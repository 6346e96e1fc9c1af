#include "data/loader_options.h"

#include <fmt/format.h>

#include "core/error.h"

namespace brrr {

DataLoaderOptions make_loader_options(const DataOptions& data, LoaderRole role,
                                      const LoaderPlacement& placement) {
  if (data.num_workers < 0) {
    throw ConfigError("data.num_workers: `auto` must be resolved before building a loader");
  }
  const bool train = role == LoaderRole::kTrain;
  return DataLoaderOptions()
      .batch_size(train ? data.batch_size : data.val.batch_size)
      .shuffle(train && data.shuffle)
      .drop_last(train && data.drop_last)
      .persistent_workers(train ? data.persistent_workers : true)
      .num_workers(data.num_workers)
      .pin_memory(data.pin_memory && placement.device.is_cuda())
      .prefetch_factor(data.prefetch_factor)
      .timeout(data.timeout)
      .stall_warning_s(data.stall_warning_s)
      .seed(placement.seed)
      .rank(placement.rank)
      .world_size(placement.world_size)
      .device(placement.device);
}

}  // namespace brrr
