#pragma once
// Helpers of the fused ops' tests (tests/core/ops/*_test.cpp): the message of a DataError, fresh
// seeds, poisoned allocations, relative errors and a finite-difference gradient.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace brrr::test {

/// The what() of the DataError that f throws, or "no error" (or the other exception's what()).
template <typename F>
std::string data_error_message(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a DataError: ") + e.what();
  }
  return "no error";
}

/// Seeds ATen's generators (CPU and CUDA) with a fresh random seed and returns it, so that every
/// run draws new inputs and a failure can name its seed (SCOPED_TRACE). With BRRR_TEST_SEED set,
/// that seed instead: a failure replayed.
uint64_t fresh_seed();

/// Allocates one tensor per (sizes, dtype) on `device`, fills each with NaN and frees them all,
/// so that the caching allocator hands those blocks to the op's outputs of the same sizes next:
/// an element the kernel does not write stays NaN and fails the comparison.
void poison(const std::vector<std::pair<std::vector<int64_t>, at::ScalarType>>& blocks,
            at::Device device);

/// ||got - want|| / ||want|| in float64 (the absolute norm when want is all zero); infinite when
/// got holds a NaN or an infinity that want does not, so NaN never passes.
double rel_error(const at::Tensor& got, const at::Tensor& want);

/// d f() / d input by central differences in float64 (input is perturbed in place and
/// restored); f returns a scalar.
at::Tensor numeric_grad(const std::function<at::Tensor()>& f, const at::Tensor& input,
                        double step = 1e-6);

}  // namespace brrr::test
