#pragma once
// Snapshot of libtorch's global random generators, for exact resume: the CPU default generator
// (init, dropout, torch::rand on CPU) and every CUDA device's default generator. brrr's own data
// RNG (core/rng.h) needs no state: it is a pure function of (seed, epoch, index).
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

namespace brrr {

/// Generator states as opaque uint8 CPU tensors (libtorch's get_state() format).
struct RngState {
  /// The CPU default generator (mt19937 state + cached normal samples).
  at::Tensor cpu;
  /// One per CUDA device, by device index (empty without CUDA).
  std::vector<at::Tensor> cuda;
};

/// Copies the current states (each under its generator's mutex).
RngState capture_rng_state();

/// Sets the generators back to `state`. CUDA states beyond this machine's device count are
/// ignored with a warning (e.g. resuming a GPU run's checkpoint on CPU).
void restore_rng_state(const RngState& state);

/// Writes `state` into `archive` under `key` (a nested archive: "cpu", "cuda_count", "cuda_<i>").
void save_rng_state(torch::serialize::OutputArchive& archive, const RngState& state,
                    const std::string& key = "rng");

/// Reads what save_rng_state wrote. Throws CheckpointError naming the missing key.
RngState load_rng_state(torch::serialize::InputArchive& archive, const std::string& key = "rng");

}  // namespace brrr
