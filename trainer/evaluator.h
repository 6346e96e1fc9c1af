#pragma once
// Evaluator: runs the validation set (or its first max_batches batches) through a validation
// step without gradients and reduces the step outputs on the device; the host reads them once.
// Metrics: val_loss (example-weighted mean of the step losses), val_<name> for each summed
// output (val_accuracy for "correct"), val_ppl for language models. In a data-parallel run each
// rank evaluates its shard and the sums are added over the ranks before the division, so the
// metrics are those of the whole set.
#include <c10/core/Device.h>

#include <functional>
#include <memory>

#include "core/precision.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "trainer/callbacks.h"
#include "trainer/step_output.h"

namespace brrr {

class Model;

class Evaluator {
 public:
  /// Host batch on the device -> model input (Trainer::prepare_batch).
  using PrepareFunction = std::function<Batch(Batch)>;
  /// Loss and sums of one batch (Trainer::validation_step); runs under autocast, without grad.
  using StepFunction = std::function<StepOutput(const Batch&)>;
  /// Adds a 1-D float64 tensor of sums over the ranks, in place (DistContext::sum).
  using SumOverRanks = std::function<void(at::Tensor&)>;

  /// The loader is created at the first run() and kept (its workers persist between runs).
  /// `max_batches` 0 = every batch (of this rank's shard). `sum_over_ranks`: null when not
  /// data-parallel; every rank then must call run() at the same point.
  Evaluator(DatasetPtr dataset, DataLoaderOptions loader_options, Precision precision,
            int64_t max_batches, SumOverRanks sum_over_ranks = nullptr);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  /// The metrics of one pass; `model` is put in eval mode for it and restored after.
  /// Throws Error when the pass sees no example.
  Metrics run(Model& model, const PrepareFunction& prepare, const StepFunction& step);

  const Dataset& dataset() const { return *dataset_; }

 private:
  DatasetPtr dataset_;
  DataLoaderOptions loader_options_;
  Precision precision_;
  int64_t max_batches_;
  SumOverRanks sum_over_ranks_;
  std::unique_ptr<DataLoader> loader_;
};

}  // namespace brrr
