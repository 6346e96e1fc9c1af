// A complete program on brrr: its own dataset and model, named from YAML, and its own loss, with
// the whole `trainer` command line. Build it against the installed package
// (examples/CMakeLists.txt) and run it like `trainer`:
//   spiral_trainer --config spirals.yaml
//   spiral_trainer --config spirals.yaml --set model.options.depth=4 --dry-run
//   spiral_trainer --config spirals.yaml --resume auto
//   spiral_trainer eval --config spirals.yaml --checkpoint auto
//   spiral_trainer export runs/spirals --out spirals.safetensors
#include <cmath>
#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include "core/config.h"
#include "data/dataset.h"
#include "data/dataset_factory.h"
#include "models/model.h"
#include "models/registry.h"
#include "trainer/cli/cli.h"
#include "trainer/trainer.h"

namespace {

// `data.dataset: spirals`: points on two interleaved spirals; the class is the arm. Its noise
// comes only from the Rng the loader hands it, so the data is identical for any num_workers.
class SpiralDataset : public brrr::Dataset {
 public:
  SpiralDataset(int64_t size, double noise, double turns)
      : size_(size), noise_(noise), turns_(turns) {}
  int64_t size() const override { return size_; }
  brrr::Sample get(int64_t index, brrr::Rng& rng) const override {
    const int64_t label = index % 2;
    const double t = 0.5 + turns_ * rng.uniform();  // half-turns along the arm
    const double angle = t * M_PI + (label ? M_PI : 0.0);
    const double r = t / (turns_ + 0.5);
    const float x = static_cast<float>(r * std::cos(angle) + noise_ * (rng.uniform() - 0.5));
    const float y = static_cast<float>(r * std::sin(angle) + noise_ * (rng.uniform() - 0.5));
    return {{"features", at::tensor({x, y})}, {"label", at::scalar_tensor(label, at::kLong)}};
  }
  std::string describe() const override {
    return fmt::format("spirals: {} points, 2 classes, noise {}", size_, noise_);
  }
  std::optional<int64_t> max_target_id() const override { return 1; }

 private:
  int64_t size_;
  double noise_;
  double turns_;
};

// `model.name: residual_mlp`: Linear stem, `depth` residual GELU blocks of `width`, Linear head.
class ResidualMlp : public brrr::Model {
 public:
  ResidualMlp(int64_t in_features, int64_t width, int64_t depth, int64_t num_classes) {
    stem_ = register_module("stem", torch::nn::Linear(in_features, width));
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < depth; ++i) blocks_->push_back(torch::nn::Linear(width, width));
    head_ = register_module("head", torch::nn::Linear(width, num_classes));
  }
  at::Tensor forward(const at::Tensor& input) override {
    at::Tensor h = at::gelu(stem_->forward(input.flatten(1)));
    for (const auto& block : *blocks_) {
      h = h + at::gelu(block->as<torch::nn::Linear>()->forward(h));
    }
    return head_->forward(h);
  }
  brrr::Task task() const override { return brrr::Task::kClassification; }
  double flops_per_example() const override {
    return 6.0 * static_cast<double>(brrr::count_parameters(*this));  // fwd + bwd of the matmuls
  }
  std::string describe() const override {
    return describe_with(fmt::format("residual_mlp ({} blocks)", blocks_->size()));
  }

 private:
  torch::nn::Linear stem_{nullptr}, head_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
};

// The training step: label-smoothed cross-entropy plus a small logit-norm penalty. Everything
// else (AMP, accumulation, clipping, schedules, checkpoints, evaluation, logging) is the stock
// loop's.
class SpiralTrainer : public brrr::Trainer {
 public:
  using Trainer::Trainer;

 protected:
  brrr::StepOutput training_step(const brrr::Batch& batch) override {
    const at::Tensor& labels = batch.at("label");                                    // (B,)
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
  // Each factory reads its own options; one it does not read (a typo) stops the run, naming it
  // and its file:line.
  brrr::register_dataset("spirals", [](const brrr::DatasetOptions& d, const std::string&) {
    return std::make_shared<SpiralDataset>(d.options.get_int("size"),
                                           d.options.get_double("noise", 0.05),
                                           d.options.get_double("turns", 3.5));
  });
  brrr::register_model("residual_mlp", [](const brrr::ModelOptions& m) {
    return std::make_shared<ResidualMlp>(2, m.options.get_int("width", 64),
                                         m.options.get_int("depth", 2), m.num_classes);
  });
  return brrr::run_cli<SpiralTrainer>(argc, argv);
}
