#pragma once
// `data.num_workers: auto` and `data.batch_size: auto`: measured at start, then printed with the
// reason, like Hugging Face's auto_find_batch_size and Lightning's batch-size finder.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/data_loader.h"

namespace brrr {

struct WorkerTrial {
  int64_t num_workers = 0;
  double batches_per_s = 0;
};

struct WorkerChoice {
  int64_t num_workers = 0;
  std::string reason;
  std::vector<WorkerTrial> trials;
};

/// Picks the smallest worker count whose loader throughput keeps up (with 50% headroom) with
/// `step_seconds`, the model's time per micro-batch. Candidates 0, 1, 2, 4, ... up to max_workers;
/// `measure(n)` returns batches/s with n workers (the default measures the real loader).
WorkerChoice choose_num_workers(double step_seconds, int64_t max_workers,
                                const std::function<double(int64_t)>& measure);

/// Batches/s of a DataLoader over `dataset` with `options` in steady state: a warm-up of one batch
/// per ring slot (num_workers * prefetch_factor + 1: every slot written, and page-locked, once),
/// then `batches` timed ones, going on into the next epochs when an epoch is shorter.
double measure_loader(const DatasetPtr& dataset, const DataLoaderOptions& options, int64_t batches);

struct BatchChoice {
  int64_t batch_size = 0;   ///< the choice: largest_fit less the headroom, a multiple of 8
  int64_t largest_fit = 0;  ///< largest multiple of 8 whose trial step fitted
  std::string reason;
};

/// Fraction of the largest batch that fits kept free by data.batch_size: auto: a trial step is not
/// the training run (the allocator fragments over many steps, cuDNN picks algorithms with other
/// workspaces), and a run that dies of OOM at step 1 is worse than a 10% smaller batch.
inline constexpr double kBatchHeadroom = 0.10;

/// Largest multiple of 8 in [8, limit] for which `try_step(b)` does not throw
/// c10::OutOfMemoryError (doubling from `start`, then bisection), and the choice: the largest
/// multiple of 8 at most (1 - headroom) times that, but at least 8 (the limit itself when it fits:
/// memory is then not the bound). Other exceptions propagate.
BatchChoice find_max_batch_size(const std::function<void(int64_t)>& try_step, int64_t start,
                                int64_t limit, double headroom = kBatchHeadroom);

}  // namespace brrr
