#pragma once
// Shared by the trainer suite's tests: small classification problems (Gaussian blobs, tiny
// images), a Trainer subclass that can be stopped or poisoned at a step, and helpers to compare
// runs.
#include <ATen/ATen.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/dataset.h"
#include "models/model.h"
#include "tests/test_fs.h"
#include "trainer/trainer.h"

namespace brrr {

namespace fs = std::filesystem;

// Two Gaussian blobs in 8-D; the augmentation noise comes from the loader's Rng.
class BlobDataset : public Dataset {
 public:
  explicit BlobDataset(int64_t n, double noise = 0.1) : n_(n), noise_(noise) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index, Rng& rng) const override {
    const int64_t label = index % 3;
    std::vector<float> x(8);
    for (int64_t j = 0; j < 8; ++j) {
      const double center = (j % 3 == label) ? 1.0 : -0.5;
      x[static_cast<size_t>(j)] = static_cast<float>(center + 0.3 * std::sin(index * 0.7 + j) +
                                                     noise_ * (rng.uniform() - 0.5));
    }
    return {{"features", at::tensor(x)}, {"label", at::scalar_tensor(label, at::kLong)}};
  }
  std::string describe() const override { return "blobs"; }

 private:
  int64_t n_;
  double noise_;
};

class BlobTrainer : public Trainer {
 public:
  BlobTrainer(ExperimentConfig config, int64_t train_size = 96)
      : Trainer(std::move(config)), train_size_(train_size) {}

  int64_t stop_at = -1;      // request a stop after this step (simulates an interruption)
  bool poison_at_3 = false;  // return a NaN loss at step 3

 protected:
  DatasetPtr build_train_dataset() override { return std::make_shared<BlobDataset>(train_size_); }
  DatasetPtr build_val_dataset() override { return std::make_shared<BlobDataset>(48, 0.0); }
  StepOutput training_step(const Batch& batch) override {
    StepOutput out = Trainer::training_step(batch);
    if (poison_at_3 && step() == 2) out.loss = out.loss * std::numeric_limits<float>::quiet_NaN();
    return out;
  }
  void on_step_end(int64_t step) override {
    if (step == stop_at) request_stop("test interruption");
  }

 private:
  int64_t train_size_;
};

// uint8 images (3 x 12 x 12) whose pattern depends on the label, with noise from the loader's Rng.
class TinyImageDataset : public Dataset {
 public:
  int64_t size() const override { return 96; }
  Sample get(int64_t index, Rng& rng) const override {
    const int64_t label = index % 3;
    at::Tensor image = at::empty({3, 12, 12}, at::kByte);
    auto* p = image.data_ptr<uint8_t>();
    for (int64_t i = 0; i < image.numel(); ++i) {
      const int64_t c = i / 144, y = (i / 12) % 12;
      const double base = c == label ? 200.0 : 60.0;
      p[i] = static_cast<uint8_t>(base + 20.0 * std::sin(static_cast<double>(y + index)) +
                                  40.0 * rng.uniform());
    }
    return {{"image", image}, {"label", at::scalar_tensor(label, at::kLong)}};
  }
  std::string describe() const override { return "tiny images"; }
};

inline std::string temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("brrr_trainer_test_" + name + "_" + std::to_string(getpid()));
  brrr::test::remove_tree(dir);
  fs::create_directories(dir);
  brrr::test::remove_at_exit(dir);
  return dir.string();
}

inline ExperimentConfig base_config(const std::string& out_dir) {
  ExperimentConfig c = parse_config(R"(
run: {name: blobs, seed: 11, device: cpu}
model: {name: mlp, in_channels: 8, image_size: 1, num_classes: 3, hidden_sizes: [16], dropout: 0.0}
data: {dataset: custom, batch_size: 16, num_workers: 0, shuffle: true, drop_last: true, val: {dataset: custom}}
optim: {name: adamw, lr: 0.01, weight_decay: 0.01, fused: "false"}
schedule: {name: cosine, warmup_steps: 2}
train: {max_steps: 6, log_every: 1, eval_every: 0, checkpoint_every: 0, max_grad_norm: 1.0}
)");
  c.run.output_dir = out_dir;
  return c;
}

inline std::vector<at::Tensor> weights(Trainer& trainer) {
  std::vector<at::Tensor> out;
  for (const auto& p : trainer.model().parameters()) out.push_back(p.detach().clone());
  return out;
}

inline std::vector<double> train_losses(const Trainer& trainer) {
  std::vector<double> out;
  for (const auto& record : trainer.history()) {
    if (record.kind == brrr::RecordKind::kTrain) out.push_back(record.values.at("loss"));
  }
  return out;
}

}  // namespace brrr
