#include "models/convnet.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/models/golden_test_util.h"

namespace brrr {
namespace {

TEST(ConvNetTest, MatchesPyTorchLogitsGradientsAndBatchNormStatistics) {
  ModelOptions o;
  o.name = "convnet";
  o.channels = {8, 16};
  o.num_classes = 10;
  ConvNet model(o);
  const auto golden = test::load_golden("models_convnet.pt");
  test::expect_matches_golden(model, golden);
  EXPECT_DOUBLE_EQ(model.flops_per_example(), 6.0 * golden.at("macs").toTensor().item<double>());
}

TEST(ConvNetTest, DefaultSizeIsSmallEnoughForCpuTraining) {
  ConvNet model(ModelOptions{});  // channels {32, 64}, 1x28x28, 10 classes
  const int64_t params = count_parameters(model);
  EXPECT_EQ(params, test::golden_count("convnet_params"));
  EXPECT_GE(params, 100'000);
  EXPECT_LE(params, 300'000);
  EXPECT_DOUBLE_EQ(model.flops_per_example(),
                   6.0 * static_cast<double>(test::golden_count("convnet_macs_28")));
}

TEST(ConvNetTest, RejectsImagesOfAnotherSizeNamingBoth) {
  ConvNet model(ModelOptions{});
  try {
    model.forward(torch::randn({1, 1, 32, 32}));
    FAIL() << "expected brrr::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("28x28"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32x32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brrr
