#include "core/rng.h"

#include <cmath>
#include <numeric>

namespace brrr {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t state = seed;
  uint64_t h = splitmix64(state);
  for (uint64_t v : {a, b, c}) {
    state = h ^ (v + 0x632be59bd9b4e019ULL);
    h = splitmix64(state);
  }
  return h;
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

double Rng::uniform(double lo, double hi) {
  return lo + (hi - lo) * uniform();
}

int64_t Rng::randint(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  if (span == 0) return static_cast<int64_t>(next_u64());  // full 64-bit range
  // Rejection sampling keeps the distribution exactly uniform.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t r;
  do {
    r = next_u64();
  } while (r >= limit);
  return lo + static_cast<int64_t>(r % span);
}

bool Rng::bernoulli(double p) {
  return uniform() < p;
}

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = rng.randint(0, i);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

}  // namespace brrr
