#include "trainer/auto_tune.h"

#include <c10/util/Exception.h>

#include <chrono>

#include "core/error.h"
#include "core/log.h"

namespace brrr {

WorkerChoice choose_num_workers(double step_seconds, int64_t max_workers,
                                const std::function<double(int64_t)>& measure) {
  if (!(step_seconds > 0)) {
    throw Error(fmt::format("choose_num_workers: step_seconds must be > 0, got {}", step_seconds));
  }
  // Batches/s the model consumes, plus 50% headroom: the loader measured alone is faster than next
  // to a training process that competes for the cores. On the H200 machine (ResNet-50, batch 256),
  // a count chosen with 10% headroom left the run waiting for data 16% of the time.
  constexpr double kHeadroom = 1.5;
  const double needed = kHeadroom / step_seconds;
  WorkerChoice choice;
  std::vector<int64_t> candidates = {0};
  for (int64_t n = 1; n <= max_workers; n *= 2) candidates.push_back(n);
  if (candidates.back() != max_workers && max_workers > 0) candidates.push_back(max_workers);
  size_t best_index = 0;  // an index: trials grows, so a pointer into it would dangle
  for (int64_t n : candidates) {
    choice.trials.push_back({n, measure(n)});
    const WorkerTrial& t = choice.trials.back();
    if (t.batches_per_s > choice.trials[best_index].batches_per_s)
      best_index = choice.trials.size() - 1;
    if (t.batches_per_s >= needed) {
      choice.num_workers = n;
      choice.reason = fmt::format(
          "{} worker(s) load {:.1f} batches/s >= {:.1f} needed by a {:.1f} ms step "
          "(+50% headroom)",
          n, t.batches_per_s, needed, step_seconds * 1e3);
      return choice;
    }
  }
  const WorkerTrial& best = choice.trials[best_index];
  choice.num_workers = best.num_workers;
  choice.reason = fmt::format(
      "no count up to {} keeps up with a {:.1f} ms step ({:.1f} batches/s needed); "
      "{} worker(s) was fastest at {:.1f} batches/s: the run will be input-bound",
      max_workers, step_seconds * 1e3, needed, best.num_workers, best.batches_per_s);
  return choice;
}

double measure_loader(const DatasetPtr& dataset, const DataLoaderOptions& options,
                      int64_t batches) {
  if (batches <= 0)
    throw Error(fmt::format("measure_loader: batches must be > 0, got {}", batches));
  DataLoader loader(dataset, options);
  if (loader.batches_per_epoch() == 0) {
    throw Error(
        fmt::format("measure_loader: the data set gives no batch ({})", dataset->describe()));
  }
  int64_t epoch = 0;
  loader.start_epoch(epoch, 0);
  auto next = [&] {
    while (!loader.next()) loader.start_epoch(++epoch, 0);
  };
  const int64_t warmup = options.num_workers() * options.prefetch_factor() + 1;
  for (int64_t i = 0; i < warmup; ++i) next();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < batches; ++i) next();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(batches) / s;
}

BatchChoice find_max_batch_size(const std::function<void(int64_t)>& try_step, int64_t start,
                                int64_t limit, double headroom) {
  if (!(headroom >= 0 && headroom < 1)) {
    throw Error(fmt::format("find_max_batch_size: headroom must be in [0, 1), got {}", headroom));
  }
  auto round8 = [](int64_t b) { return std::max<int64_t>(8, b / 8 * 8); };
  auto fits = [&](int64_t b) {
    try {
      try_step(b);
      return true;
    } catch (const c10::OutOfMemoryError&) {
      return false;
    }
  };
  int64_t good = 0;
  int64_t bad = 0;
  for (int64_t b = round8(start); b <= limit; b *= 2) {
    if (!fits(b)) {
      bad = b;
      break;
    }
    good = b;
  }
  if (bad == 0 && good < round8(limit)) {  // doubling stepped over the limit: try the limit
    (fits(round8(limit)) ? good : bad) = round8(limit);
  }
  if (good == 0) {
    if (bad == 8 || !fits(8))
      throw Error("data.batch_size: auto: even a batch of 8 does not fit in device memory");
    good = 8;
  }
  while (bad != 0 && bad - good > 8) {  // bisection over multiples of 8
    const int64_t mid = round8((good + bad) / 2);
    if (mid <= good) break;
    (fits(mid) ? good : bad) = mid;
  }
  BatchChoice choice;
  choice.largest_fit = good;
  if (bad == 0) {  // memory was not the bound: nothing to keep headroom for
    choice.batch_size = good;
    choice.reason = fmt::format("batch {} fits and is the search limit", good);
    return choice;
  }
  choice.batch_size = round8(static_cast<int64_t>(static_cast<double>(good) * (1.0 - headroom)));
  choice.reason = fmt::format(
      "batch {} fits in device memory, {} does not; {:.0f}% of {} kept as headroom for the run",
      good, bad, 100.0 * headroom, good);
  return choice;
}

}  // namespace brrr
