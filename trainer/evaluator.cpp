#include "trainer/evaluator.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cmath>

#include "core/error.h"
#include "data/prefetcher.h"
#include "models/model.h"
#include "trainer/observe/metric_record.h"

namespace brrr {

Evaluator::Evaluator(DatasetPtr dataset, DataLoaderOptions loader_options, Precision precision,
                     int64_t max_batches, SumOverRanks sum_over_ranks)
    : dataset_(std::move(dataset)),
      loader_options_(std::move(loader_options)),
      precision_(precision),
      max_batches_(max_batches),
      sum_over_ranks_(std::move(sum_over_ranks)) {}

Evaluator::~Evaluator() = default;

Metrics Evaluator::run(Model& model, const PrepareFunction& prepare, const StepFunction& step) {
  const c10::Device device = loader_options_.device();
  if (!loader_) loader_ = std::make_unique<DataLoader>(dataset_, loader_options_);
  const bool was_training = model.is_training();
  model.eval();
  const auto opts = at::TensorOptions().device(device).dtype(at::kDouble);
  at::Tensor loss_sum = at::zeros({}, opts);
  std::map<std::string, at::Tensor> sums;
  int64_t examples = 0;
  int64_t batches = 0;
  {
    torch::NoGradGuard no_grad;
    loader_->start_epoch(0, 0);
    Prefetcher prefetcher(*loader_, device);
    while (auto host_batch = prefetcher.next()) {
      const Batch batch = prepare(std::move(*host_batch));
      StepOutput out;
      {
        AutocastGuard autocast(precision_, device);
        out = step(batch);
      }
      loss_sum.add_(out.loss.detach().to(at::kDouble), static_cast<double>(out.examples));
      for (const auto& [name, value] : out.sums) {
        auto it = sums.find(name);
        if (it == sums.end()) {
          sums.emplace(name, value.detach().to(at::kDouble).clone());
        } else {
          it->second.add_(value.detach().to(at::kDouble));
        }
      }
      examples += out.examples;
      if (max_batches_ > 0 && ++batches >= max_batches_) break;
    }
  }
  if (was_training) model.train();

  // One read of every accumulated value (after one all-reduce of them all when data-parallel).
  std::vector<std::string> names = {"loss"};
  std::vector<at::Tensor> parts = {loss_sum.reshape({1}),
                                   at::full({1}, static_cast<double>(examples), opts)};
  for (const auto& [name, value] : sums) {
    names.push_back(name);
    parts.push_back(value.reshape({1}));
  }
  at::Tensor totals = at::cat(parts);
  if (sum_over_ranks_) sum_over_ranks_(totals);
  const at::Tensor host = totals.to(at::kCPU);
  const double* all = host.data_ptr<double>();
  const double n = all[1];
  if (n == 0) {
    throw Error(fmt::format("evaluation saw no examples ({})", dataset_->describe()));
  }
  std::vector<double> v = {all[0]};
  v.insert(v.end(), all + 2, all + host.numel());
  Metrics metrics;
  for (size_t i = 0; i < names.size(); ++i) {
    metrics[names[i] == "correct" ? metric::kValAccuracy : "val_" + names[i]] = v[i] / n;
  }
  if (model.task() == Task::kLanguageModel) {
    metrics[metric::kValPpl] = std::exp(metrics[metric::kValLoss]);
  }
  return metrics;
}

}  // namespace brrr
