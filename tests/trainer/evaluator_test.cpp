// Evaluator alone: val_loss is the example-weighted mean of the batch losses and val_accuracy the
// share of correct predictions, both against a direct computation over the whole set (batches
// that do not divide the set included); max_batches stops early; the model's mode is restored.
#include "trainer/evaluator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/tensor_dataset.h"
#include "models/model.h"
#include "models/registry.h"

namespace brrr {
namespace {

std::shared_ptr<Model> small_mlp() {
  torch::manual_seed(5);
  ModelOptions m;
  m.name = "mlp";
  m.in_channels = 4;
  m.image_size = 1;
  m.num_classes = 3;
  m.hidden_sizes = {8};
  return make_model(m);
}

StepOutput step_of(Model& model, const Batch& batch) {
  StepOutput out;
  const at::Tensor logits = model.forward(batch.at("features"));
  out.loss = at::cross_entropy_loss(logits, batch.at("label"));
  out.sums["correct"] = logits.argmax(1).eq(batch.at("label")).sum();
  out.examples = batch.at("label").size(0);
  return out;
}

DataLoaderOptions loader(int64_t batch_size) {
  return DataLoaderOptions().batch_size(batch_size).shuffle(false).drop_last(false);
}

TEST(EvaluatorTest, ReducesLossAndAccuracyOverTheWholeSet) {
  torch::manual_seed(9);
  const at::Tensor x = at::randn({23, 4});
  const at::Tensor y = at::randint(0, 3, {23}, at::kLong);
  auto data = std::make_shared<TensorDataset>(
      std::map<std::string, at::Tensor>{{"features", x}, {"label", y}});
  auto model = small_mlp();
  model->train();
  Evaluator evaluator(data, loader(5), Precision::kFP32, 0);
  const Metrics m = evaluator.run(
      *model, [](Batch b) { return b; }, [&](const Batch& b) { return step_of(*model, b); });
  EXPECT_TRUE(model->is_training()) << "the training mode is restored";
  torch::NoGradGuard no_grad;
  model->eval();
  const at::Tensor logits = model->forward(x);
  const double loss = at::cross_entropy_loss(logits, y).item<double>();
  const double accuracy = logits.argmax(1).eq(y).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(m.at("val_loss"), loss, 1e-6);
  EXPECT_DOUBLE_EQ(m.at("val_accuracy"), accuracy);
  EXPECT_EQ(m.count("val_ppl"), 0u) << "not a language model";

  Evaluator two_batches(data, loader(5), Precision::kFP32, 2);
  const Metrics first10 = two_batches.run(
      *model, [](Batch b) { return b; }, [&](const Batch& b) { return step_of(*model, b); });
  const double loss10 =
      at::cross_entropy_loss(model->forward(x.narrow(0, 0, 10)), y.narrow(0, 0, 10)).item<double>();
  EXPECT_NEAR(first10.at("val_loss"), loss10, 1e-6);
}

TEST(EvaluatorTest, AnEmptySetIsAnError) {
  auto data = std::make_shared<TensorDataset>(std::map<std::string, at::Tensor>{
      {"features", at::zeros({0, 4})}, {"label", at::zeros({0}, at::kLong)}});
  auto model = small_mlp();
  Evaluator evaluator(data, loader(4), Precision::kFP32, 0);
  EXPECT_THROW(
      evaluator.run(
          *model, [](Batch b) { return b; }, [&](const Batch& b) { return step_of(*model, b); }),
      Error);
}

}  // namespace
}  // namespace brrr
