#include "data/sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "core/error.h"
#include "core/rng.h"

namespace brrr {
namespace {

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

TEST(SamplerTest, SequentialIsIdentityEveryEpoch) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.indices(7), s.indices(0));
}

TEST(SamplerTest, RandomIsAPermutationFromSeedAndEpoch) {
  RandomSampler s(100, 42);
  const std::vector<int64_t> e0 = s.indices(0);
  const std::vector<int64_t> e1 = s.indices(1);
  EXPECT_EQ(e0, random_permutation(100, mix_seed(42, 0)));
  EXPECT_EQ(e0, RandomSampler(100, 42).indices(0)) << "not a pure function of (seed, epoch)";
  EXPECT_NE(e0, e1) << "no reshuffle between epochs";
  EXPECT_NE(e0, RandomSampler(100, 43).indices(0)) << "seed ignored";
  std::vector<int64_t> sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, SequentialSampler(100).indices(0));
}

TEST(SamplerTest, DistributedShardsAreDisjointAndCoverTheEpoch) {
  const int64_t n = 23;
  for (bool drop_last : {false, true}) {
    for (int64_t ws : {1, 2, 3, 4, 8}) {
      std::map<int64_t, int> seen;
      int64_t total = 0;
      for (int64_t r = 0; r < ws; ++r) {
        DistributedSampler s(n, r, ws, /*shuffle=*/true, /*seed=*/9, drop_last);
        const std::vector<int64_t> shard = s.indices(3);
        EXPECT_EQ(static_cast<int64_t>(shard.size()), s.size());
        EXPECT_EQ(s.size(), drop_last ? n / ws : (n + ws - 1) / ws);
        for (int64_t i : shard) ++seen[i];
        total += static_cast<int64_t>(shard.size());
      }
      const int64_t distinct = static_cast<int64_t>(seen.size());
      if (drop_last) {
        EXPECT_EQ(distinct, total) << "ws " << ws << ": shards overlap";
        EXPECT_EQ(distinct, n / ws * ws);
      } else {
        EXPECT_EQ(distinct, n) << "ws " << ws << ": shards do not cover the epoch";
        EXPECT_EQ(total - distinct, total - n) << "more repeats than the padding";
      }
    }
  }
}

TEST(SamplerTest, DistributedReshufflesPerEpochConsistentlyAcrossRanks) {
  DistributedSampler r0(40, 0, 2, true, 5, false);
  DistributedSampler r1(40, 1, 2, true, 5, false);
  EXPECT_NE(r0.indices(0), r0.indices(1));
  std::set<int64_t> all;
  for (int64_t i : r0.indices(1)) all.insert(i);
  for (int64_t i : r1.indices(1)) all.insert(i);
  EXPECT_EQ(all.size(), 40u) << "ranks disagree on the epoch's permutation";
}

TEST(SamplerTest, DistributedMatchesPyTorchPaddingAndDropLast) {
  const std::string path = std::string(BRRR_GOLDEN_DIR) + "/sampler_distributed.pt";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing " << path << " (run tests/golden/make_all.py)";
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const c10::Dict<c10::IValue, c10::IValue> golden = torch::pickle_load(bytes).toGenericDict();
  ASSERT_GT(golden.size(), 0u);
  for (const auto& item : golden) {
    const std::string name = item.key().toStringRef();
    int64_t n = 0, ws = 0, r = 0, drop = 0;
    ASSERT_EQ(std::sscanf(name.c_str(), "n%ld_ws%ld_r%ld_drop%ld", &n, &ws, &r, &drop), 4) << name;
    DistributedSampler s(n, r, ws, /*shuffle=*/false, /*seed=*/0, drop != 0);
    EXPECT_EQ(s.indices(0), to_vector(item.value().toTensor())) << name;
  }
}

TEST(SamplerTest, DistributedRejectsBadRank) {
  EXPECT_THROW(DistributedSampler(10, 2, 2, false, 0, false), ConfigError);
  EXPECT_THROW(DistributedSampler(10, 0, 0, false, 0, false), ConfigError);
  try {
    DistributedSampler(10, 5, 4, false, 0, false);
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("got 5"), std::string::npos) << e.what();
  }
}

TEST(SamplerTest, StridedShardsEvaluateEveryExampleExactlyOnce) {
  for (int64_t n : {0, 1, 7, 23, 24}) {
    for (int64_t ws : {1, 2, 3, 5, 8}) {
      std::vector<int64_t> all;
      int64_t smallest = n, largest = 0;
      for (int64_t r = 0; r < ws; ++r) {
        const StridedShardSampler s(n, r, ws);
        const std::vector<int64_t> shard = s.indices(4);
        EXPECT_EQ(static_cast<int64_t>(shard.size()), s.size()) << "n " << n << " ws " << ws;
        EXPECT_TRUE(std::is_sorted(shard.begin(), shard.end()));
        smallest = std::min(smallest, s.size());
        largest = std::max(largest, s.size());
        all.insert(all.end(), shard.begin(), shard.end());
      }
      std::sort(all.begin(), all.end());
      EXPECT_EQ(all, SequentialSampler(n).indices(0)) << "n " << n << " ws " << ws;
      EXPECT_LE(largest - smallest, 1) << "n " << n << " ws " << ws;
    }
  }
  EXPECT_THROW(StridedShardSampler(10, 3, 3), ConfigError);
  EXPECT_THROW(StridedShardSampler(10, 0, 0), ConfigError);
}

}  // namespace
}  // namespace brrr
