#include "models/state_dict.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "models/registry.h"

namespace brrr {
namespace {

std::shared_ptr<Model> tiny_convnet() {
  ModelOptions o;
  o.name = "convnet";
  o.channels = {2};
  o.image_size = 8;
  return make_model(o);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no brrr::Error thrown>";
}

TEST(StateDictTest, NamedStateHoldsParametersAndBuffersByDottedName) {
  const auto model = tiny_convnet();
  const auto state = named_state(*model);
  for (const char* key :
       {"conv0.weight", "bn0.weight", "bn0.bias", "bn0.running_mean", "bn0.running_var",
        "bn0.num_batches_tracked", "fc.weight", "fc.bias", "head.weight", "head.bias"}) {
    EXPECT_EQ(state.count(key), 1u) << key;
  }
  EXPECT_EQ(state.size(), 10u);
}

TEST(StateDictTest, CopiesEveryTensorByNameIntoTheModel) {
  const auto source = tiny_convnet();
  {
    at::NoGradGuard no_grad;
    for (auto& [name, t] : named_state(*source))
      t.copy_(torch::rand(t.sizes()).mul(100).to(t.dtype()));
  }
  const auto target = tiny_convnet();
  load_state_dict(*target, named_state(*source));
  for (const auto& [name, t] : named_state(*target)) {
    EXPECT_TRUE(t.equal(named_state(*source).at(name))) << name;
  }
  EXPECT_TRUE(target->named_parameters()["fc.weight"].requires_grad());
}

TEST(StateDictTest, ListsMissingAndUnexpectedKeysAndCopiesNothing) {
  const auto model = tiny_convnet();
  auto state = named_state(*tiny_convnet());
  const at::Tensor before = model->named_parameters()["head.weight"].clone();
  state.erase("bn0.running_var");
  state.erase("fc.bias");
  state["head.weight"] = torch::zeros_like(before);
  state["classifier.weight"] = torch::zeros({1});
  const std::string msg = message_of([&] { load_state_dict(*model, state); });
  EXPECT_NE(msg.find("2 missing key(s) [bn0.running_var, fc.bias]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 unexpected key(s) [classifier.weight]"), std::string::npos) << msg;
  EXPECT_TRUE(model->named_parameters()["head.weight"].equal(before));
}

TEST(StateDictTest, ShapeMismatchNamesKeyAndBothShapes) {
  const auto model = tiny_convnet();
  auto state = named_state(*tiny_convnet());
  state["fc.weight"] = torch::zeros({3, 5});
  const std::string msg = message_of([&] { load_state_dict(*model, state); });
  EXPECT_NE(msg.find("'fc.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64, 32]"), std::string::npos) << msg;  // 2 channels * 4 * 4 -> 64
}

TEST(StateDictTest, TiedWeightMayBeAbsentAndIsFilledThroughItsTwin) {
  ModelOptions o;
  o.name = "gpt";
  o.n_layer = 1;
  o.n_head = 2;
  o.n_embd = 8;
  o.block_size = 4;
  o.vocab_size = 10;
  const auto model = make_model(o);
  auto state = named_state(*make_model(o));
  state.erase("lm_head.weight");
  load_state_dict(*model, state);
  const auto mine = named_state(*model);
  EXPECT_TRUE(mine.at("lm_head.weight").equal(state.at("transformer.wte.weight")));
}

TEST(StateDictTest, ReadsPythonTorchSaveAndRejectsMissingFile) {
  const auto counts = load_tensor_dict(std::string(BRRR_GOLDEN_DIR) + "/models_counts.pt");
  EXPECT_EQ(counts.at("resnet18_params").item<int64_t>(), 11689512);
  const std::string msg = message_of([] { load_tensor_dict("/nonexistent/w.pt"); });
  EXPECT_NE(msg.find("/nonexistent/w.pt"), std::string::npos) << msg;
}

TEST(StateDictTest, DictOverloadRejectsNonTensorValuesNamingTheKey) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert(std::string("fc.weight"), int64_t{3});
  const auto model = tiny_convnet();
  const std::string msg = message_of([&] { load_state_dict(*model, dict); });
  EXPECT_NE(msg.find("'fc.weight'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace brrr
