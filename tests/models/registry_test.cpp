#include "models/registry.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace brrr {
namespace {

ModelOptions small_options(const std::string& name) {
  ModelOptions o;
  o.name = name;
  o.num_classes = 5;
  o.in_channels = 3;
  o.image_size = 16;  // small: every model stays cheap (resnet50 included)
  o.hidden_sizes = {16};
  o.channels = {4, 8};
  o.stem = "small";
  o.n_layer = 1;
  o.n_head = 2;
  o.n_embd = 16;
  o.block_size = 8;
  o.vocab_size = 11;
  return o;
}

TEST(RegistryTest, ListsTheFiveModels) {
  EXPECT_EQ(model_names(),
            (std::vector<std::string>{"mlp", "convnet", "resnet18", "resnet50", "gpt"}));
}

TEST(RegistryTest, BuildsEveryNameWithTheDocumentedForwardContract) {
  for (const auto& name : model_names()) {
    SCOPED_TRACE(name);
    torch::manual_seed(0);
    const auto model = make_model(small_options(name));
    ASSERT_NE(model, nullptr);
    EXPECT_TRUE(model->is_training());
    EXPECT_GT(count_parameters(*model), 0);
    EXPECT_GT(model->flops_per_example(), 0.0);
    EXPECT_NE(model->describe().find(name), std::string::npos) << model->describe();
    if (name == "gpt") {
      EXPECT_EQ(model->task(), Task::kLanguageModel);
      const at::Tensor logits = model->forward(torch::randint(0, 11, {2, 8}, at::kLong));
      EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 8, 11}));
    } else {
      EXPECT_EQ(model->task(), Task::kClassification);
      const at::Tensor logits = model->forward(torch::randn({2, 3, 16, 16}));
      EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 5}));
    }
  }
}

TEST(RegistryTest, UnknownNameThrowsConfigErrorNamingKeyAndValidNames) {
  ModelOptions o;
  o.name = "resnet34";
  try {
    make_model(o);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.name"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'resnet34'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mlp, convnet, resnet18, resnet50, gpt"), std::string::npos) << msg;
  }
}

void expect_config_error_naming(ModelOptions o, const std::string& key) {
  try {
    make_model(o);
    ADD_FAILURE() << "expected ConfigError naming " << key;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

TEST(RegistryTest, InvalidOptionsThrowConfigErrorNamingTheKey) {
  auto gpt = small_options("gpt");
  gpt.n_head = 3;  // 16 % 3 != 0
  expect_config_error_naming(gpt, "model.n_head");
  auto resnet = small_options("resnet18");
  resnet.stem = "cifar";
  expect_config_error_naming(resnet, "model.stem");
  auto convnet = small_options("convnet");
  convnet.channels = {};
  expect_config_error_naming(convnet, "model.channels");
  convnet.channels = {4, 4, 4, 4, 4};  // 16 px halves to 0 before the 5th block
  expect_config_error_naming(convnet, "model.image_size");
  auto mlp = small_options("mlp");
  mlp.hidden_sizes = {8, 0};
  expect_config_error_naming(mlp, "model.hidden_sizes[1]");
  mlp.hidden_sizes = {8};
  mlp.dropout = 1.0;
  expect_config_error_naming(mlp, "model.dropout");
}

TEST(RegistryTest, WrongInputThrowsErrorNamingTheShape) {
  const auto convnet = make_model(small_options("convnet"));
  try {
    convnet->forward(torch::randn({2, 1, 16, 16}));
    FAIL() << "expected brrr::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 1, 16, 16]"), std::string::npos) << e.what();
  }
  const auto gpt = make_model(small_options("gpt"));
  EXPECT_THROW(gpt->forward(torch::zeros({1, 9}, at::kLong)), Error);  // T 9 > block_size 8
  EXPECT_THROW(gpt->forward(torch::zeros({1, 4})), Error);             // float tokens
}

}  // namespace
}  // namespace brrr
