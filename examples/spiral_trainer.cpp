// Subclassing brrr::Trainer: a custom dataset (two interleaved spirals, generated on the fly) and a
// custom loss (label-smoothed cross-entropy plus a logit-norm penalty), trained by the stock loop
// with everything it brings: AMP policy, accumulation, clipping, schedules, checkpoints, logging.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include <ATen/ATen.h>

#include "core/config.h"
#include "data/dataset.h"
#include "models/model.h"
#include "trainer/trainer.h"

namespace {

// Points on two spirals; class = spiral arm. Noise comes only from the Rng the loader hands us, so
// the data is identical for any num_workers.
class SpiralDataset : public brrr::Dataset {
 public:
  SpiralDataset(int64_t size, double noise) : size_(size), noise_(noise) {}
  int64_t size() const override { return size_; }
  brrr::Sample get(int64_t index, brrr::Rng& rng) const override {
    const int64_t label = index % 2;
    const double t = 0.5 + 3.5 * rng.uniform();  // radians/pi along the arm
    const double angle = t * M_PI + (label ? M_PI : 0.0);
    const double r = t / 4.0;
    const float x = static_cast<float>(r * std::cos(angle) + noise_ * (rng.uniform() - 0.5));
    const float y = static_cast<float>(r * std::sin(angle) + noise_ * (rng.uniform() - 0.5));
    return {{"features", at::tensor({x, y})}, {"label", at::scalar_tensor(label, at::kLong)}};
  }
  std::string describe() const override { return "spirals: " + std::to_string(size_) + " points, 2 classes"; }

 private:
  int64_t size_;
  double noise_;
};

class SpiralTrainer : public brrr::Trainer {
 public:
  using Trainer::Trainer;

 protected:
  brrr::DatasetPtr build_train_dataset() override { return std::make_shared<SpiralDataset>(8192, 0.05); }
  brrr::DatasetPtr build_val_dataset() override { return std::make_shared<SpiralDataset>(2048, 0.05); }

  brrr::StepOutput training_step(const brrr::Batch& batch) override {
    const at::Tensor& labels = batch.at("label");                          // (B,)
    const at::Tensor logits = model().forward(batch.at("features")).to(at::kFloat);  // (B, 2)
    brrr::StepOutput out;
    out.loss = at::cross_entropy_loss(logits, labels, /*weight=*/{}, at::Reduction::Mean,
                                      /*ignore_index=*/-100, /*label_smoothing=*/0.05) +
               1e-3 * logits.pow(2).mean();
    out.sums["correct"] = logits.argmax(1).eq(labels).sum();
    out.examples = labels.size(0);
    return out;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 600;
  std::string out_dir = "runs";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") steps = std::atoll(argv[i + 1]);
    if (flag == "--out") out_dir = argv[i + 1];
  }
  try {
    brrr::ExperimentConfig config = brrr::parse_config(R"(
run: {name: spirals, seed: 7, device: auto}
model: {name: mlp, in_channels: 2, image_size: 1, num_classes: 2, hidden_sizes: [64, 64]}
data: {dataset: custom, batch_size: 128, num_workers: 2, val: {dataset: custom, batch_size: 512}}
optim: {name: adamw, lr: 1.0e-2, weight_decay: 0.0}
schedule: {name: cosine, warmup_steps: 20}
train: {max_steps: 600, log_every: 50, eval_every: 200}
)");
    config.train.max_steps = steps;
    config.run.output_dir = out_dir;
    SpiralTrainer trainer(config);
    trainer.fit();
    const brrr::Metrics metrics = trainer.evaluate();
    std::cout << "final accuracy " << metrics.at("val_accuracy") << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "spiral_trainer: " << e.what() << "\n";
    return 1;
  }
}
