#include "data/sampler.h"

#include <fmt/format.h>

#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace brrr {
namespace {

std::vector<int64_t> arange(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

void check_size(int64_t n, const char* what) {
  if (n < 0) throw ConfigError(fmt::format("{}: dataset size must be >= 0, got {}", what, n));
}

void check_rank(int64_t rank, int64_t world_size, const char* what) {
  if (world_size < 1) {
    throw ConfigError(fmt::format("{}: world_size must be >= 1, got {}", what, world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw ConfigError(fmt::format("{}: rank must be in [0, {}), got {}", what, world_size, rank));
  }
}

}  // namespace

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  check_size(n, "SequentialSampler");
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  return arange(n_);
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  check_size(n, "RandomSampler");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return random_permutation(n_, mix_seed(seed_, static_cast<uint64_t>(epoch)));
}

DistributedSampler::DistributedSampler(int64_t n, int64_t rank, int64_t world_size, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : n_(n),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  check_size(n, "DistributedSampler");
  check_rank(rank, world_size, "DistributedSampler");
  per_rank_ = drop_last ? n / world_size : (n + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order =
      shuffle_ ? random_permutation(n_, mix_seed(seed_, static_cast<uint64_t>(epoch))) : arange(n_);
  const int64_t total = per_rank_ * world_size_;
  if (total <= n_) {
    order.resize(static_cast<size_t>(total));  // drop_last: drop the tail
  } else if (n_ > 0) {
    // Pad by repeating from the start (several times over when world_size > n).
    const int64_t pad = total - n_;
    for (int64_t i = 0; i < pad; ++i) order.push_back(order[static_cast<size_t>(i % n_)]);
  }
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = rank_; i < total; i += world_size_)
    shard.push_back(order[static_cast<size_t>(i)]);
  return shard;
}

StridedShardSampler::StridedShardSampler(int64_t n, int64_t rank, int64_t world_size)
    : n_(n), rank_(rank), world_size_(world_size) {
  check_size(n, "StridedShardSampler");
  check_rank(rank, world_size, "StridedShardSampler");
}

std::vector<int64_t> StridedShardSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(size()));
  for (int64_t i = rank_; i < n_; i += world_size_) shard.push_back(i);
  return shard;
}

int64_t StridedShardSampler::size() const {
  return rank_ < n_ ? (n_ - rank_ + world_size_ - 1) / world_size_ : 0;
}

}  // namespace brrr
