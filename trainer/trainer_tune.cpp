// Trainer: the auto-tuners of data.batch_size and data.num_workers (see auto_tune.h), which
// measure this model on this device before the loaders are built.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/ScopeExit.h>

#include <thread>

#include "core/device_info.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/loader_options.h"
#include "models/model.h"
#include "trainer/auto_tune.h"
#include "trainer/dist/dist_context.h"
#include "trainer/optim/grad_scaler.h"
#include "trainer/optim/optimizer.h"
#include "trainer/trainer.h"

namespace brrr {

// A batch of `batch_size` copies of example 0 on the device, prepared as a training batch is.
Batch Trainer::probe_batch(int64_t batch_size) {
  Rng rng(0);
  const Sample spec = train_set_->get(0, rng);
  Batch batch;
  for (const auto& [key, value] : spec) {
    std::vector<int64_t> shape = {batch_size};
    shape.insert(shape.end(), value.sizes().begin(), value.sizes().end());
    batch[key] = value.unsqueeze(0).expand(shape).contiguous().to(device_);
  }
  return prepare_batch(std::move(batch));
}

// One forward+backward (no optimizer step, so the weights are untouched). Used by the auto-tuners.
void Trainer::probe_step(const Batch& batch) {
  StepOutput out;
  {
    AutocastGuard autocast(precision_, device_);
    out = training_step(batch);
  }
  scaler_->scale(out.loss).backward();
  optimizer_->zero_grad();
}

void Trainer::auto_tune() {
  DataOptions& d = config_.data;
  auto sync = [this] {
    if (device_.is_cuda())
      c10::impl::VirtualGuardImpl(device_.type()).synchronizeDevice(device_.index());
  };
  if (d.batch_size == 0) {
    if (!device_.is_cuda()) {
      d.batch_size = 64;
      log::info("data.batch_size: auto needs a CUDA device to measure memory; using 64 on {}",
                device_.str());
    } else {
      int64_t param_bytes = 0;
      for (const auto& p : params_) param_bytes += p.numel() * p.element_size();
      int64_t sample_bytes = 0;  // one example as the loader delivers it
      Rng rng(0);
      for (const auto& [key, value] : train_set_->get(0, rng))
        sample_bytes += static_cast<int64_t>(value.nbytes());
      // cuDNN's autotuner would benchmark every convolution again at every trial size (minutes
      // for a ResNet); the heuristic algorithms are enough to see what fits.
      const bool benchmark = at::globalContext().benchmarkCuDNN();
      at::globalContext().setBenchmarkCuDNN(false);
      const auto restore =
          c10::make_scope_exit([benchmark] { at::globalContext().setBenchmarkCuDNN(benchmark); });
      const BatchChoice choice = find_max_batch_size(
          [&](int64_t b) {
            // Room for the optimizer's state (two moments), which the trial does not allocate,
            // and for two more batches: the prefetcher's next one and the previous one, whose
            // memory the allocator frees only once the step that used it is done.
            const at::Tensor reserve = at::empty({2 * param_bytes + 2 * b * sample_bytes},
                                                 at::TensorOptions(at::kByte).device(device_));
            probe_step(probe_batch(b));
            sync();
          },
          8, 4096);
      detail::cuda_empty_cache();
      d.batch_size = choice.batch_size;
      log::info("data.batch_size: auto -> {} ({}, precision {})", d.batch_size, choice.reason,
                config_.train.precision);
    }
    if (dist_) {
      // Every rank must take the same micro-batches (the epochs and the all-reduces line up):
      // the size that fits on every GPU.
      const int64_t agreed = dist_->min(d.batch_size);
      if (agreed != d.batch_size) {
        log::info("data.batch_size: auto -> {} on every rank (the smallest any rank measured)",
                  agreed);
      }
      d.batch_size = agreed;
    }
  }
  if (d.num_workers < 0) {
    LoaderPlacement placement;
    placement.device = device_;
    placement.seed = config_.run.seed;
    const Batch batch = probe_batch(d.batch_size);
    probe_step(batch);  // warm-up (cuDNN autotuning, allocator)
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    const int kSteps = 3;
    for (int i = 0; i < kSteps; ++i) probe_step(batch);
    sync();
    const double step_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kSteps;
    // The ranks on one machine share its cores.
    const int64_t ranks_here = dist_ ? std::max<int64_t>(1, dist_->env().local_world_size) : 1;
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency() / ranks_here);
    const auto choice = choose_num_workers(step_s, std::min<int64_t>(cores, 32), [&](int64_t n) {
      DataOptions trial = d;
      trial.num_workers = n;
      auto options = make_loader_options(trial, LoaderRole::kTrain, placement)
                         .drop_last(true)
                         .persistent_workers(true);
      // Two rounds of the ring after the warm-up; at least 8 batches.
      return measure_loader(train_set_, options, std::max<int64_t>(8, 2 * n * d.prefetch_factor));
    });
    std::string table;
    for (const auto& t : choice.trials)
      table += fmt::format(" {}:{:.1f}", t.num_workers, t.batches_per_s);
    log::info("data.num_workers: auto -> {} ({}); measured batches/s by workers:{}",
              choice.num_workers, choice.reason, table);
    d.num_workers = choice.num_workers;
  }
}

}  // namespace brrr
