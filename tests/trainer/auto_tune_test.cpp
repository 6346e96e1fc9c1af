// The auto-tuners' decisions, with the measurements injected (the real measurements need a GPU or
// take seconds; their plumbing is exercised by the trainer on the GPU machine).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <map>
#include <memory>

#include "core/error.h"
#include "data/tensor_dataset.h"
#include "trainer/auto_tune.h"

namespace brrr {
namespace {

TEST(AutoTuneTest, PicksTheSmallestWorkerCountThatKeepsUp) {
  // 25 ms steps need 40 batches/s, 60 with headroom; each worker adds 12 batches/s.
  std::vector<int64_t> asked;
  const auto choice = choose_num_workers(0.025, 16, [&](int64_t n) {
    asked.push_back(n);
    return 12.0 * static_cast<double>(std::max<int64_t>(n, 1));
  });
  EXPECT_EQ(choice.num_workers, 8);
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 1, 2, 4, 8}));  // stops measuring once one keeps up
  EXPECT_NE(choice.reason.find("8 worker(s) load 96.0 batches/s >= 60.0 needed"), std::string::npos)
      << choice.reason;
}

TEST(AutoTuneTest, ReportsAnInputBoundRunWhenNothingKeepsUp) {
  const auto choice =
      choose_num_workers(0.001, 6, [](int64_t n) { return n == 4 ? 300.0 : 100.0; });
  EXPECT_EQ(choice.num_workers, 4);     // the fastest measured
  EXPECT_EQ(choice.trials.size(), 5u);  // 0, 1, 2, 4, 6
  EXPECT_NE(choice.reason.find("input-bound"), std::string::npos) << choice.reason;
}

void fake_step(int64_t batch, int64_t capacity) {
  TORCH_CHECK_WITH(OutOfMemoryError, batch <= capacity, "CUDA out of memory (fake) at batch ",
                   batch);
}

TEST(AutoTuneTest, FindsTheLargestBatchThatFitsAsAMultipleOfEight) {
  for (int64_t capacity : {8, 37, 200, 256, 1000, 3317}) {
    const auto choice =
        find_max_batch_size([&](int64_t b) { fake_step(b, capacity); }, 8, 4096, 0.0);
    EXPECT_EQ(choice.largest_fit, capacity / 8 * 8) << "capacity " << capacity;
    EXPECT_EQ(choice.batch_size, capacity / 8 * 8) << "capacity " << capacity;
  }
}

TEST(AutoTuneTest, KeepsHeadroomBelowTheLargestBatchThatFits) {
  // 3312 fits (as ResNet-50 bf16 on the H200, whose training run then died of OOM): 10% less,
  // rounded down to a multiple of 8.
  const auto choice = find_max_batch_size([](int64_t b) { fake_step(b, 3317); }, 8, 4096);
  EXPECT_EQ(choice.largest_fit, 3312);
  EXPECT_EQ(choice.batch_size, 2976);  // 0.9 * 3312 = 2980.8
  EXPECT_NE(choice.reason.find("batch 3312 fits in device memory, 3320 does not; 10% of 3312 kept"),
            std::string::npos)
      << choice.reason;
  // Never below 8.
  EXPECT_EQ(find_max_batch_size([](int64_t b) { fake_step(b, 9); }, 8, 4096).batch_size, 8);
}

TEST(AutoTuneTest, TheSearchLimitIsTriedEvenWhenDoublingStepsOverIt) {
  std::vector<int64_t> asked;
  const auto capped = find_max_batch_size(
      [&](int64_t b) {
        asked.push_back(b);
        fake_step(b, 100000);
      },
      8, 1000);
  EXPECT_EQ(capped.batch_size, 1000);  // memory is not the bound: no headroom
  EXPECT_EQ(asked.back(), 1000);
  EXPECT_NE(capped.reason.find("search limit"), std::string::npos) << capped.reason;
  // 700 fits, the limit 1000 does not: bisection between 512 and 1000.
  EXPECT_EQ(find_max_batch_size([](int64_t b) { fake_step(b, 700); }, 8, 1000, 0.0).largest_fit,
            696);
}

TEST(AutoTuneTest, RejectsAHeadroomOutsideZeroToOne) {
  EXPECT_THROW(find_max_batch_size([](int64_t) {}, 8, 64, 1.0), brrr::Error);
  EXPECT_THROW(find_max_batch_size([](int64_t) {}, 8, 64, -0.1), brrr::Error);
}

TEST(AutoTuneTest, MeasuresTheLoaderAcrossEpochBoundaries) {
  // 10 batches per epoch, 2 workers x prefetch 2: a warm-up of 5 batches and 40 timed ones run
  // through five epochs.
  auto dataset = std::make_shared<TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::arange(80, at::kFloat).reshape({80, 1})}});
  for (int64_t workers : {0, 2}) {
    const auto options = DataLoaderOptions()
                             .batch_size(8)
                             .num_workers(workers)
                             .prefetch_factor(2)
                             .persistent_workers(true)
                             .shuffle(true)
                             .seed(3);
    const double rate = measure_loader(dataset, options, 40);
    EXPECT_GT(rate, 0.0) << workers << " workers";
    EXPECT_TRUE(std::isfinite(rate));
  }
  EXPECT_THROW(measure_loader(dataset, DataLoaderOptions().batch_size(8), 0), brrr::Error);
}

TEST(AutoTuneTest, NothingFitsIsAClearError) {
  try {
    find_max_batch_size([](int64_t b) { fake_step(b, 4); }, 8, 4096);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("even a batch of 8"), std::string::npos);
  }
}

TEST(AutoTuneTest, OtherErrorsPropagate) {
  EXPECT_THROW(find_max_batch_size([](int64_t) { throw DataError("bad sample"); }, 8, 64),
               DataError);
}

}  // namespace
}  // namespace brrr
