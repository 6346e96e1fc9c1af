// CsvDataset: parsing of tests/data/fixtures/tiny.csv (CRLF, blank line, spaces, signs,
// exponents) and errors that name file:line:column and the offending text.
#include "data/csv_dataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

std::string fixture() {
  return std::string(BRRR_SOURCE_DIR) + "/tests/data/fixtures/tiny.csv";
}

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path path = fs::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

std::string data_error_of(const std::string& path, int64_t label_column = -1, bool header = true) {
  try {
    CsvDataset data(path, label_column, header);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError for " << path;
  return "";
}

TEST(CsvDatasetTest, ParsesFixtureWithHeaderAndLastLabel) {
  CsvDataset data(fixture());
  ASSERT_EQ(data.size(), 4);
  ASSERT_EQ(data.num_features(), 4);
  EXPECT_EQ(data.feature_names(), (std::vector<std::string>{"sepal_length", "sepal_width",
                                                            "petal_length", "petal_width"}));
  Rng rng(0);
  Sample s = data.get(2, rng);
  EXPECT_EQ(s.at("features").scalar_type(), at::kFloat);
  EXPECT_TRUE(s.at("features").equal(torch::tensor({6.3f, 3.3f, 6.0f, 2.5f})));
  EXPECT_EQ(s.at("label").dim(), 0);
  EXPECT_EQ(s.at("label").item<int64_t>(), 2);
  EXPECT_TRUE(data.get(3, rng).at("features").equal(torch::tensor({-0.15f, 2.0f, 0.0f, 1000.0f})));
  EXPECT_TRUE(data.labels().equal(torch::tensor({0, 1, 2, 1}, at::kLong)));
  EXPECT_THROW(data.get(4, rng), DataError);
}

TEST(CsvDatasetTest, LabelColumnFromStartAndNoHeader) {
  const std::string path = write_temp("first.csv", "3,0.5,1.5\n7,2.5,3.5\n");
  CsvDataset data(path, 0, false);
  ASSERT_EQ(data.size(), 2);
  EXPECT_TRUE(data.labels().equal(torch::tensor({3, 7}, at::kLong)));
  EXPECT_TRUE(data.features()[1].equal(torch::tensor({2.5f, 3.5f})));
  fs::remove(path);
}

TEST(CsvDatasetTest, BadCellNamesFileLineColumnAndText) {
  const std::string path = write_temp("bad.csv", "a,b,label\n1,2,0\n3, x7 ,1\n");
  const std::string message = data_error_of(path);
  EXPECT_NE(message.find(path + ":3:4"), std::string::npos) << message;
  EXPECT_NE(message.find("'x7'"), std::string::npos) << message;
  fs::remove(path);
}

TEST(CsvDatasetTest, RaggedRowAndFractionalLabelAreErrors) {
  const std::string ragged = write_temp("ragged.csv", "1,2,0\n1,2\n");
  std::string message = data_error_of(ragged, -1, false);
  EXPECT_NE(message.find(ragged + ":2"), std::string::npos) << message;
  EXPECT_NE(message.find("2 cells, expected 3"), std::string::npos) << message;
  const std::string fractional = write_temp("frac.csv", "1,2,0.5\n");
  message = data_error_of(fractional, -1, false);
  EXPECT_NE(message.find(fractional + ":1:5"), std::string::npos) << message;
  EXPECT_THROW(CsvDataset(fractional, 5, false), ConfigError);
  fs::remove(ragged);
  fs::remove(fractional);
}

TEST(CsvDatasetTest, NonFiniteCellsAndNegativeLabelsNameFileLineColumn) {
  const std::string path = write_temp("nan.csv", "a,b,label\n1,2,0\n3,nan,1\n");
  std::string message = data_error_of(path);
  EXPECT_NE(message.find(path + ":3:3: 'nan' is not a finite number"), std::string::npos)
      << message;
  const std::string inf = write_temp("inf.csv", "a,b,label\n-inf,2,0\n");
  message = data_error_of(inf);
  EXPECT_NE(message.find(inf + ":2:1"), std::string::npos) << message;
  const std::string negative = write_temp("neg.csv", "1,2,-1\n");
  message = data_error_of(negative, -1, false);
  EXPECT_NE(message.find(negative + ":1:5: label '-1' is negative"), std::string::npos) << message;
  for (const auto& p : {path, inf, negative}) fs::remove(p);
}

TEST(CsvDatasetTest, MissingFileNamesPath) {
  const std::string message = data_error_of("/nonexistent/brrr.csv");
  EXPECT_NE(message.find("/nonexistent/brrr.csv"), std::string::npos) << message;
}

}  // namespace
}  // namespace brrr
