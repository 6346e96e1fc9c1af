#pragma once
// Builds a Dataset from its typed options (`data:` or `data.val:`).
#include <cstdint>
#include <string>

#include "core/config.h"
#include "data/dataset.h"

namespace brrr {

/// Default folder of the Fashion-MNIST IDX files when `path` is empty.
inline constexpr const char* kFashionMnistDefaultPath = "/usr/share/datasets/fashion-mnist";

/// `fashion_mnist`, `image_folder`, `token_file` or `csv` from `options` (as resolved by the
/// config: token_file's block_size is > 0); `limit` > 0 keeps the first `limit` examples. `key` is
/// the options' key path for messages ("data" or "data.val"): ConfigError naming `<key>.dataset`
/// for an unknown name, DataError naming `<key>.path` and the path when it does not exist.
DatasetPtr make_dataset(const DatasetOptions& options, const std::string& key = "data");

/// The first `limit` examples of `base` (all of them when limit >= base->size()).
DatasetPtr make_subset(DatasetPtr base, int64_t limit);

}  // namespace brrr
