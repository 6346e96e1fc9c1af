#pragma once
// Small, fast, reproducible random numbers for data augmentation and sampling.
// Invariant: every random decision of the data pipeline is a pure function of (seed, epoch, index)
// through mix_seed(); nothing depends on which worker or process draws it. This is what makes
// batches bit-identical for any num_workers.
#include <cstdint>
#include <vector>

namespace brrr {

/// SplitMix64-based hash of several values into one well-mixed 64-bit seed.
uint64_t mix_seed(uint64_t seed, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0);

/// xoshiro256** generator. Cheap to construct: one per sample is fine.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  /// Uniform in [0, 1).
  double uniform();
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi);
  /// Uniform integer in [lo, hi] (inclusive); requires lo <= hi.
  int64_t randint(int64_t lo, int64_t hi);
  /// True with probability p.
  bool bernoulli(double p);

 private:
  uint64_t s_[4];
};

/// A permutation of [0, n) as a function of seed only (Fisher-Yates with Rng).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace brrr
