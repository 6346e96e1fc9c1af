#include "models/mlp.h"

#include <gtest/gtest.h>

#include "tests/models/golden_test_util.h"

namespace brrr {
namespace {

TEST(MlpTest, MatchesPyTorchLogitsAndGradients) {
  ModelOptions o;
  o.name = "mlp";
  o.in_channels = 1;
  o.image_size = 8;
  o.hidden_sizes = {32, 16};
  o.num_classes = 5;
  Mlp model(o);
  const auto golden = test::load_golden("models_mlp.pt");
  test::expect_matches_golden(model, golden);
  EXPECT_DOUBLE_EQ(model.flops_per_example(), 6.0 * golden.at("macs").toTensor().item<double>());
}

TEST(MlpTest, DefaultParameterCountMatchesPyTorch) {
  ModelOptions o;
  o.name = "mlp";
  EXPECT_EQ(count_parameters(Mlp(o)), test::golden_count("mlp_params"));  // 784-256-256-10
}

TEST(MlpTest, DropoutActsOnlyInTraining) {
  ModelOptions o;
  o.dropout = 0.5;
  Mlp model(o);
  const at::Tensor x = torch::randn({4, 1, 28, 28});
  model.eval();
  EXPECT_TRUE(model.forward(x).equal(model.forward(x)));
  model.train();
  EXPECT_FALSE(model.forward(x).equal(model.forward(x)));
}

}  // namespace
}  // namespace brrr
