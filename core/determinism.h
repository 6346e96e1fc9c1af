#pragma once
// `train.deterministic`: the same config, seed and device give the same run bit for bit.
//
// brrr's own pieces are reproducible already (the loader's order and augmentations follow the
// seed at any number of workers; the fused-op kernels add in a fixed order, without atomics). What
// is not, by default, is a few library kernels: the backward of the fused attention kernels (flash,
// cuDNN, memory-efficient: each accumulates dQ/dK/dV across blocks in arrival order; measured on
// an H200, two GPT-2 runs part at step 1 with each of them, bench/RESULTS.md section 6, update 14),
// cuDNN's autotuned convolution algorithms, and ATen's scatter-style backward passes.
// set_deterministic(true) makes ATen pick its deterministic algorithm wherever it has one and
// raise an error naming the op where it has none (torch.use_deterministic_algorithms(True)).

namespace brrr {

/// Process-wide, for every op after it. On: ATen's deterministic algorithms only (an op without one
/// raises), deterministic cuDNN without its autotuner, and CUBLAS_WORKSPACE_CONFIG=:4096:8 unless
/// the environment sets it (cuBLAS needs a workspace of its own per stream to be reproducible;
/// a value cuBLAS cannot be reproducible with makes the first matmul raise, naming the variable).
/// ATen's filling of new tensors with NaN in this mode (a check for reads of uninitialised
/// memory, which changes nothing a correct program computes) stays off: on GPT-2 it would write
/// every activation buffer once more. Off: ATen's fastest choice again (cuDNN's autotuner is the
/// caller's to turn on). Harmless without CUDA.
void set_deterministic(bool enabled);

/// Whether set_deterministic(true) is in force.
bool deterministic();

/// set_deterministic(enabled) for a scope (a deterministic section of a program, a test); the
/// state before it is set again when the scope ends.
class DeterministicScope {
 public:
  explicit DeterministicScope(bool enabled = true) : previous_(deterministic()) {
    set_deterministic(enabled);
  }
  ~DeterministicScope() { set_deterministic(previous_); }
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  bool previous_;
};

}  // namespace brrr
