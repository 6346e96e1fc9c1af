#pragma once
// Builds a Dataset from its typed options (`data:` or `data.val:`): brrr's own datasets and those
// a program registers at run time with register_dataset(), which `data.dataset` then names.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/dataset.h"

namespace brrr {

/// Default folder of the Fashion-MNIST IDX files when `path` is empty.
inline constexpr const char* kFashionMnistDefaultPath = "/usr/share/datasets/fashion-mnist";

/// Builds a dataset from its options: the shared keys (`path`, `split`, `transforms`, ...) and,
/// for its own settings, `options.options` (data.options in YAML). `key` is "data" or
/// "data.val", for messages.
using DatasetFactory =
    std::function<DatasetPtr(const DatasetOptions& options, const std::string& key)>;

/// Makes `name` a valid `data.dataset` (and `data.val.dataset`). Call it before the config's
/// data is built. Throws std::invalid_argument when `name` is empty, one of brrr's datasets, or
/// registered already, or when `factory` is empty. Thread-safe. The dataset is built in the
/// trainer process; forked loader workers use that object.
void register_dataset(const std::string& name, DatasetFactory factory);

/// brrr's datasets, then the registered ones in registration order.
std::vector<std::string> dataset_names();

/// `fashion_mnist`, `image_folder`, `token_file`, `csv` or a registered dataset from `options` (as
/// resolved by the config: token_file's block_size is > 0); `limit` > 0 keeps the first `limit`
/// examples. `key` is the options' key path for messages ("data" or "data.val"): ConfigError naming
/// `<key>.dataset` for an unknown name, DataError naming `<key>.path` and the path when it does not
/// exist, and ConfigError naming a `data.options` key that the dataset's factory did not read.
DatasetPtr make_dataset(const DatasetOptions& options, const std::string& key = "data");

/// The first `limit` examples of `base` (all of them when limit >= base->size()).
DatasetPtr make_subset(DatasetPtr base, int64_t limit);

}  // namespace brrr
