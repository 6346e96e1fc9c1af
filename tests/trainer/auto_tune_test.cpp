// The auto-tuners' decisions, with the measurements injected (the real measurements need a GPU or
// take seconds; their plumbing is exercised by the trainer on the GPU machine).
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include "core/error.h"
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
  const auto choice = choose_num_workers(0.001, 6, [](int64_t n) { return n == 4 ? 300.0 : 100.0; });
  EXPECT_EQ(choice.num_workers, 4);  // the fastest measured
  EXPECT_EQ(choice.trials.size(), 5u);  // 0, 1, 2, 4, 6
  EXPECT_NE(choice.reason.find("input-bound"), std::string::npos) << choice.reason;
}

void fake_step(int64_t batch, int64_t capacity) {
  TORCH_CHECK_WITH(OutOfMemoryError, batch <= capacity, "CUDA out of memory (fake) at batch ", batch);
}

TEST(AutoTuneTest, FindsTheLargestBatchThatFitsAsAMultipleOfEight) {
  for (int64_t capacity : {8, 37, 200, 256, 1000}) {
    const auto choice = find_max_batch_size([&](int64_t b) { fake_step(b, capacity); }, 8, 4096);
    EXPECT_EQ(choice.batch_size, capacity / 8 * 8) << "capacity " << capacity;
  }
  const auto capped = find_max_batch_size([](int64_t b) { fake_step(b, 100000); }, 8, 512);
  EXPECT_EQ(capped.batch_size, 512);
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
  EXPECT_THROW(find_max_batch_size([](int64_t) { throw DataError("bad sample"); }, 8, 64), DataError);
}

}  // namespace
}  // namespace brrr
