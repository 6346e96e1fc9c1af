#include "data/prefetcher.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/data/loader_test_util.h"

namespace brrr {
namespace {

DataLoaderOptions options(int64_t workers) {
  return DataLoaderOptions().batch_size(4).shuffle(true).seed(77).num_workers(workers);
}

std::vector<Batch> reference_epoch(int64_t n, int64_t epoch) {
  DataLoader loader(std::make_shared<testing::PatternDataset>(n), options(0));
  loader.start_epoch(epoch);
  std::vector<Batch> out;
  while (std::optional<Batch> b = loader.next()) {
    Batch c;
    for (const auto& [k, t] : *b) c[k] = t.clone();
    out.push_back(c);
  }
  return out;
}

void expect_equal_on_cpu(const Batch& got, const Batch& want, size_t index) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, t] : want) {
    ASSERT_TRUE(got.at(k).to(at::kCPU).equal(t)) << "batch " << index << " key " << k;
  }
}

TEST(PrefetcherTest, PassesBatchesThroughOnCpu) {
  const std::vector<Batch> want = reference_epoch(30, 1);
  DataLoader loader(std::make_shared<testing::PatternDataset>(30), options(2));
  Prefetcher prefetcher(loader, c10::Device(c10::kCPU));
  loader.start_epoch(1);
  size_t i = 0;
  while (std::optional<Batch> b = prefetcher.next()) {
    ASSERT_LT(i, want.size());
    EXPECT_TRUE(b->at("x").device().is_cpu());
    expect_equal_on_cpu(*b, want[i], i);
    EXPECT_GE(prefetcher.last_wait_seconds(), 0.0);
    ++i;
  }
  EXPECT_EQ(i, want.size());
}

TEST(PrefetcherTest, CudaBatchesArePinned) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t workers : {0, 2}) {
    DataLoader loader(std::make_shared<testing::PatternDataset>(16),
                      options(workers).pin_memory(true).device(c10::Device(c10::kCUDA, 0)));
    EXPECT_TRUE(loader.pinned());
    std::optional<Batch> b = loader.next();
    ASSERT_TRUE(b.has_value());
    for (const auto& [k, t] : *b) EXPECT_TRUE(t.is_pinned()) << k << ", " << workers << " workers";
  }
}

TEST(PrefetcherTest, CudaCopiesEqualCpuBatchesOverManyEpochsAndSlotReuse) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  const int64_t n = 402;  // 101 batches: the ring's slots are reused many times
  DataLoader loader(std::make_shared<testing::PatternDataset>(n),
                    options(2).pin_memory(true).device(cuda).persistent_workers(true));
  Prefetcher prefetcher(loader, cuda);
  for (int64_t epoch : {0, 1}) {
    const std::vector<Batch> want = reference_epoch(n, epoch);
    prefetcher.start_epoch(epoch);
    std::vector<at::Tensor> results;  // device work queued on the compute stream, read at the end
    size_t i = 0;
    while (std::optional<Batch> b = prefetcher.next()) {
      ASSERT_LT(i, want.size());
      EXPECT_TRUE(b->at("x").is_cuda());
      results.push_back(b->at("x") * 2 + b->at("label").unsqueeze(1).unsqueeze(2).to(at::kFloat));
      ++i;
    }
    ASSERT_EQ(i, want.size());
    for (size_t j = 0; j < want.size(); ++j) {
      const at::Tensor expect =
          want[j].at("x") * 2 + want[j].at("label").unsqueeze(1).unsqueeze(2).to(at::kFloat);
      ASSERT_TRUE(results[j].cpu().equal(expect)) << "epoch " << epoch << " batch " << j;
    }
  }
}

TEST(PrefetcherTest, CudaRestartMidEpochDropsTheStagedBatch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  const std::vector<Batch> want = reference_epoch(40, 3);
  DataLoader loader(std::make_shared<testing::PatternDataset>(40),
                    options(2).pin_memory(true).device(cuda));
  Prefetcher prefetcher(loader, cuda);
  prefetcher.start_epoch(2);
  ASSERT_TRUE(prefetcher.next().has_value());
  loader.start_epoch(3, 1);  // behind the prefetcher's back
  size_t i = 1;
  while (std::optional<Batch> b = prefetcher.next()) {
    ASSERT_LT(i, want.size());
    expect_equal_on_cpu(*b, want[i], i);
    ++i;
  }
  EXPECT_EQ(i, want.size());
}

}  // namespace
}  // namespace brrr
