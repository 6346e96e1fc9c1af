// make_dataset from options: names, defaults (model.block_size, Fashion-MNIST path), limit,
// errors naming keys and paths; and TensorDataset.
#include "data/dataset_factory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"
#include "data/tensor_dataset.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(BRRR_SOURCE_DIR) + "/tests/data/fixtures/" + name;
}

DatasetOptions options(const std::string& dataset, const std::string& path) {
  DatasetOptions o;
  o.dataset = dataset;
  o.path = path;
  return o;
}

TEST(DatasetFactoryTest, UnknownNameIsConfigErrorNamingKey) {
  try {
    make_dataset(options("imagenet21k", ""));
    ADD_FAILURE() << "unknown dataset accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.dataset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("imagenet21k"), std::string::npos) << e.what();
  }
}

TEST(DatasetFactoryTest, MissingPathNamesKeyAndPath) {
  for (const char* name : {"csv", "token_file", "image_folder", "fashion_mnist"}) {
    try {
      make_dataset(options(name, "/nonexistent/brrr_data"), "data.val");
      ADD_FAILURE() << name << ": missing path accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("data.val.path"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("/nonexistent/brrr_data"), std::string::npos)
          << e.what();
    }
  }
}

TEST(DatasetFactoryTest, CsvWithLimitIsASubset) {
  DatasetOptions o = options("csv", fixture("tiny.csv"));
  EXPECT_EQ(make_dataset(o)->size(), 4);
  o.limit = 2;
  DatasetPtr data = make_dataset(o);
  EXPECT_EQ(data->size(), 2);
  Rng rng(0);
  EXPECT_EQ(data->get(1, rng).at("label").item<int64_t>(), 1);
  EXPECT_THROW(data->get(2, rng), DataError);
  EXPECT_NE(data->describe().find("first 2"), std::string::npos) << data->describe();
}

TEST(DatasetFactoryTest, TokenFileTakesTheResolvedBlockSize) {
  const fs::path path = fs::temp_directory_path() / ("brrr_factory_" + std::to_string(::getpid()));
  std::vector<uint16_t> tokens(100, 7);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 200);
  DatasetOptions o = options("token_file", path.string());
  o.windows = "sequential";
  o.block_size = 0;  // unresolved: the config turns 0 into model.block_size before this point
  try {
    make_dataset(o, "data.val");
    ADD_FAILURE() << "block_size 0 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.val.block_size"), std::string::npos) << e.what();
  }
  o.block_size = 8;
  Rng rng(0);
  DatasetPtr data = make_dataset(o);
  EXPECT_EQ(data->size(), 99 / 8);
  EXPECT_EQ(data->get(0, rng).at("tokens").size(0), 9);
  o.block_size = 4;
  EXPECT_EQ(make_dataset(o)->get(0, rng).at("tokens").size(0), 5);
  o.token_dtype = "uint64";
  EXPECT_THROW(make_dataset(o), ConfigError);
  fs::remove(path);
}

TEST(DatasetFactoryTest, FashionMnistDefaultPath) {
  if (!fs::exists(kFashionMnistDefaultPath)) GTEST_SKIP() << "Fashion-MNIST not installed";
  DatasetOptions o = options("fashion_mnist", "");
  o.split = "test";
  o.limit = 100;
  DatasetPtr data = make_dataset(o);
  EXPECT_EQ(data->size(), 100);
  EXPECT_NE(data->describe().find(kFashionMnistDefaultPath), std::string::npos);
}

TEST(TensorDatasetTest, IndexesDimZeroAndChecksLengths) {
  at::Tensor x = at::arange(12, at::kFloat).reshape({4, 3});
  at::Tensor y = at::arange(4, at::kLong);
  TensorDataset data({{"x", x}, {"y", y}});
  EXPECT_EQ(data.size(), 4);
  Rng rng(0);
  Sample s = data.get(2, rng);
  EXPECT_TRUE(s.at("x").equal(x[2]));
  EXPECT_EQ(s.at("y").item<int64_t>(), 2);
  s.at("x").fill_(-1);  // samples are copies
  EXPECT_EQ(x[2][0].item<float>(), 6.0f);
  EXPECT_THROW(data.get(4, rng), DataError);
  try {
    TensorDataset({{"x", x}, {"y", at::arange(5)}});
    ADD_FAILURE() << "length mismatch accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'y' has 5 rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TensorDataset({}), DataError);
  EXPECT_THROW(TensorDataset({{"s", at::scalar_tensor(1.0)}}), DataError);
}

}  // namespace
}  // namespace brrr
