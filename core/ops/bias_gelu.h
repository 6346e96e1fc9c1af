#pragma once
// Op `bias_gelu`: the MLP's "add the bias of the first matmul, then GELU (tanh approximation)" in
// one pass, y = gelu_tanh(x + bias), as GPT-2 computes it.
//
//   x:       (N, D) bf16, fp16, float32 or float64 (N = B * T rows, D = 4 C: the matmul's output
//            without its bias)
//   bias:    (D,) x's dtype or float32 (float32 parameters under mixed precision)
//   returns: y (N, D) x's dtype, gelu_tanh(x + bias) computed in float (float64 for float64) and
//            rounded once.
// Non-contiguous x is made contiguous first (a copy).
//
// Paths: bias_gelu_reference (ATen: at::gelu(x + bias, "tanh") in float; differentiated by
// autograd; the CPU path and the tests' oracle) and, for CUDA tensors in a build with CUDA, the
// autograd Function below with three kernels (bias_gelu.cu):
//   forward:  elementwise, grid-stride over 16-byte vectors.
//   backward: dx = dy * gelu_tanh'(x + bias) in x's dtype, recomputing x + bias; each block adds
//             its rows' dx (as rounded to x's dtype, so dbias is exactly the row sum of the dx
//             returned) per column into float partial sums, and a second small kernel adds the
//             blocks' partials in a fixed order into dbias (bias's dtype; deterministic: no
//             atomics).
// Why kernels and not cuBLASLt's epilogues (GELU_AUX_BIAS forward, DGELU_BGRAD backward): measured
// both ways on an H200 at GPT-2's c_fc (bench_ops_bench mlp_gelu, bench/RESULTS.md section 6),
// the GEMM + these kernels take 0.386 ms forward + backward against 0.596 ms for the epilogues
// (the forward epilogue alone is 1.12x faster; DGELU_BGRAD's backward 2x slower).
// Saved for backward: x (before the bias) and bias; x + bias is recomputed, so no (N, D) tensor
// beyond x is kept alive. No double backward. Autocast does not see this op (a custom Function):
// it runs in x's dtype.
//
// Kernel invariant: D % (16 / sizeof(x's element)) == 0 (8 for bf16) and 16-byte-aligned
// x, dy and outputs (and bias aligned to as many of its elements) give 16-byte accesses; other
// D take the scalar path.
#include <ATen/core/Tensor.h>

#include <vector>

namespace brrr {

/// The op, dispatched on x's device. Throws DataError naming shapes/dtypes for bad input.
at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias);

/// The reference: ATen ops on any device, differentiated by autograd.
at::Tensor bias_gelu_reference(const at::Tensor& x, const at::Tensor& bias);

namespace detail {
/// The autograd Function on any device: the kernels for CUDA tensors, and on the CPU the same
/// stages written in ATen ops (the derivative's formula included), so its plumbing and formula
/// are tested without a GPU. Arguments as bias_gelu.
at::Tensor bias_gelu_function(const at::Tensor& x, const at::Tensor& bias);

/// Forward kernel's launcher (bias_gelu.cu); arguments checked, x contiguous.
at::Tensor bias_gelu_forward_cuda(const at::Tensor& x, const at::Tensor& bias);
/// Backward kernels' launcher; dy (N, D) x's dtype, contiguous. Returns {dx, dbias}.
std::vector<at::Tensor> bias_gelu_backward_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                const at::Tensor& bias);
/// Whether this build has the CUDA kernels.
bool bias_gelu_cuda_built();
}  // namespace detail

}  // namespace brrr
