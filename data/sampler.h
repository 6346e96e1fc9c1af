#pragma once
// Samplers: the index list of one epoch as a pure function of (seed, epoch).
//
// Invariant: indices(epoch) depends on nothing but the constructor arguments and `epoch` (never
// on call order, worker count or process), so a resumed run and every rank of a distributed run
// agree on the order without communicating.
#include <cstdint>
#include <memory>
#include <vector>

namespace brrr {

/// Produces the sample indices of one epoch, in loading order.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of epoch `epoch` (each in [0, dataset size)).
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  /// Number of indices per epoch (the same for every epoch).
  virtual int64_t size() const = 0;
};

using SamplerPtr = std::shared_ptr<const Sampler>;

/// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

/// A permutation of [0, n) drawn from mix_seed(seed, epoch): a new order every epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// The shard of rank `rank` among `world_size` ranks, as PyTorch's DistributedSampler: the epoch
/// order (shuffled from mix_seed(seed, epoch) or sequential) is padded by repeating its start up
/// to a multiple of world_size (or its tail dropped when drop_last), then rank r takes positions
/// r, r + world_size, r + 2 * world_size, ... Shards are disjoint (before padding) and together
/// cover the epoch.
class DistributedSampler : public Sampler {
 public:
  /// Throws ConfigError when world_size < 1, rank outside [0, world_size) or n < 0.
  DistributedSampler(int64_t n, int64_t rank, int64_t world_size, bool shuffle, uint64_t seed,
                     bool drop_last);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return per_rank_; }

 private:
  int64_t n_;
  int64_t rank_;
  int64_t world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_rank_;  // indices per rank and epoch
};

/// The evaluation shard of rank `rank` among `world_size` ranks: examples rank, rank +
/// world_size, rank + 2 * world_size, ... of [0, n), in order, without padding, so that over all
/// ranks every example is evaluated exactly once (shards differ in size by at most one).
class StridedShardSampler : public Sampler {
 public:
  /// Throws ConfigError when world_size < 1, rank outside [0, world_size) or n < 0.
  StridedShardSampler(int64_t n, int64_t rank, int64_t world_size);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

 private:
  int64_t n_;
  int64_t rank_;
  int64_t world_size_;
};

}  // namespace brrr
