#include "data/dataset_factory.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/name_registry.h"
#include "data/csv_dataset.h"
#include "data/fashion_mnist.h"
#include "data/image_folder.h"
#include "data/token_file.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

/// The first n examples of another dataset.
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(DatasetPtr base, int64_t n) : base_(std::move(base)), n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index, Rng& rng) const override {
    if (index < 0 || index >= n_) {
      throw DataError(fmt::format("subset: index {} out of range [0, {})", index, n_));
    }
    return base_->get(index, rng);
  }
  std::string describe() const override {
    return fmt::format("first {} of {}", n_, base_->describe());
  }

 private:
  DatasetPtr base_;
  int64_t n_;
};

void require_path(const std::string& path, const std::string& key, const std::string& what) {
  if (path.empty()) throw ConfigError(key + ".path: required for " + what);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw DataError(key + ".path: " + what + " path '" + path + "' does not exist");
  }
}

NameRegistry<DatasetFactory>& registry() {
  static NameRegistry<DatasetFactory> r("dataset",
                                        {"fashion_mnist", "image_folder", "token_file", "csv"});
  return r;
}

}  // namespace

void register_dataset(const std::string& name, DatasetFactory factory) {
  registry().add(name, std::move(factory));
}

std::vector<std::string> dataset_names() {
  return registry().names();
}

DatasetPtr make_subset(DatasetPtr base, int64_t limit) {
  if (limit <= 0 || limit >= base->size()) return base;
  return std::make_shared<SubsetDataset>(std::move(base), limit);
}

DatasetPtr make_dataset(const DatasetOptions& options, const std::string& key) {
  const std::string& name = options.dataset;
  DatasetPtr dataset;
  if (name == "fashion_mnist") {
    const std::string path = options.path.empty() ? kFashionMnistDefaultPath : options.path;
    require_path(path, key, "fashion_mnist");
    dataset = std::make_shared<FashionMnistDataset>(path, options.split, options.transforms,
                                                    key + ".transforms");
  } else if (name == "image_folder") {
    require_path(options.path, key, "image_folder");
    dataset = std::make_shared<ImageFolderDataset>(options.path, options.transforms);
  } else if (name == "token_file") {
    require_path(options.path, key, "token_file");
    if (options.block_size <= 0) {
      throw ConfigError(
          fmt::format("{}.block_size: must be > 0 for token_file, got {} (the config "
                      "resolves 0 to model.block_size)",
                      key, options.block_size));
    }
    dataset = std::make_shared<TokenFileDataset>(options.path, options.block_size,
                                                 parse_token_dtype(options.token_dtype),
                                                 parse_token_windows(options.windows));
  } else if (name == "csv") {
    require_path(options.path, key, "csv");
    dataset = std::make_shared<CsvDataset>(options.path, options.label_column, options.header);
  } else if (DatasetFactory factory = registry().find(name)) {
    dataset = factory(options, key);
    if (!dataset) {
      throw Error(
          fmt::format("the factory of dataset '{}' ({}.dataset) returned no dataset", name, key));
    }
  } else {
    throw ConfigError(key + ".dataset: " + unknown_name_message("dataset", name, dataset_names()));
  }
  options.options.check_all_read(fmt::format("dataset '{}' ({}.dataset)", name, key));
  return make_subset(std::move(dataset), options.limit);
}

}  // namespace brrr
