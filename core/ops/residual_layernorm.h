#pragma once
// Op `residual_layernorm`: the transformer block's "add to the residual stream, then normalise"
// in one pass over the rows.
//
//   residual: (N, C) float32, bf16, fp16 or float64 (N = B * T rows of the residual stream)
//   x:        (N, C) residual's dtype, or bf16/fp16 under a float32 residual (the attention or
//             MLP branch's output as autocast's matmul leaves it: added in float, as
//             `residual + x` promotes, so no cast kernel runs before the op)
//   weight:   (C,) float32 (float64 for float64 activations): LayerNorm's gamma
//   bias:     (C,) weight's dtype: LayerNorm's beta
//   eps:      added to the variance, as in torch.nn.LayerNorm
//   out_dtype: y's dtype (bf16 for the next matmul under mixed precision, float32, ...)
//   x_bias:   (C,) weight's dtype, or undefined: the bias of the linear whose output x is, left
//             out of that linear's GEMM and added here (new_residual = residual + (x + x_bias) in
//             float), so its gradient, the column sum of d(x), comes from the backward's own pass
//             over d(x) instead of a separate reduction kernel reading it again (on an H200 the
//             op's fwd+bwd is then 2.2-2.4 % faster than the op plus that kernel, and the GPT-2
//             step, 24 launches fewer, was 0.6-0.7 % faster: bench/RESULTS.md section 6)
//   returns {new_residual, y}:
//     new_residual: (N, C) residual's dtype, residual + x (+ x_bias) rounded once to that dtype
//     y:            (N, C) out_dtype, (new_residual - mean) * rstd * weight + bias, the statistics
//                   in float over the rounded new_residual, the biased variance as LayerNorm's
// Non-contiguous residual/x are made contiguous first (a copy).
//
// Paths: residual_layernorm_reference (ATen: the add, then at::layer_norm in float; differentiated
// by autograd; the CPU path and the tests' oracle) and, for CUDA tensors in a build with CUDA,
// the autograd Function below with three kernels (residual_layernorm.cu):
//   forward:  one warp per row: the sum written once, mean and variance in float by two passes
//             over the row, which stays in registers (rows of up to 1024 float32 or 2048
//             bf16/fp16 elements; wider rows are re-read from the cache by each pass).
//   backward: one warp per row: d(residual) = d(x) = d(new_residual) + dLN(dy) in residual's
//             dtype (one tensor returned for both; a narrower x also gets it rounded to x's
//             dtype, written by the same pass); each block adds its rows' dy * xhat and dy
//             into per-block partial sums in float, and a second small kernel sums the blocks'
//             partials in a fixed order into dweight and dbias (deterministic: no atomics);
//             with x_bias, the same pass and the same launch sum d(x) in float (d residual
//             before any rounding to x's dtype) into d(x_bias), each lane's sums in registers
//             for a float32 stream with a 16-bit y and C <= 1024 (GPT's), in shared memory
//             otherwise.
// Saved for backward: new_residual, weight, mean (N,) and rstd (N,) in float (float64 for
// float64 activations). An unused output's gradient counts as zero. No double backward.
// Autocast does not see this op (a custom Function): it runs in the dtypes given.
//
// Kernel invariant: C % (16 / sizeof(element)) == 0 (C % 8 for bf16/fp16, C % 4 for float32)
// and 16-byte-aligned rows give 16-byte loads and stores; other C (1000, say) take the scalar
// path, one element per lane per step.
#include <ATen/core/Tensor.h>

#include <tuple>
#include <vector>

namespace brrr {

/// The op, dispatched on residual's device. Throws DataError naming shapes/dtypes for bad input.
std::tuple<at::Tensor, at::Tensor> residual_layernorm(const at::Tensor& residual,
                                                      const at::Tensor& x, const at::Tensor& weight,
                                                      const at::Tensor& bias, double eps,
                                                      at::ScalarType out_dtype,
                                                      const at::Tensor& x_bias = {});

/// The reference: ATen ops on any device, differentiated by autograd.
std::tuple<at::Tensor, at::Tensor> residual_layernorm_reference(
    const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
    const at::Tensor& bias, double eps, at::ScalarType out_dtype, const at::Tensor& x_bias = {});

namespace detail {
/// The autograd Function on any device: the kernels for CUDA tensors, and on the CPU the same
/// stages written in ATen ops (the backward's formula included), so its plumbing and its
/// gradient formula are tested without a GPU. Arguments as residual_layernorm.
std::tuple<at::Tensor, at::Tensor> residual_layernorm_function(
    const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
    const at::Tensor& bias, double eps, at::ScalarType out_dtype, const at::Tensor& x_bias = {});

/// Forward kernel's launcher (residual_layernorm.cu); arguments checked and contiguous.
/// Returns {new_residual, y, mean, rstd}. rows_in_registers = false takes the kernel's cache path
/// even where the row fits in registers (tests and the bench compare the two paths, which give
/// the same bits).
std::vector<at::Tensor> residual_layernorm_forward_cuda(
    const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
    const at::Tensor& bias, double eps, at::ScalarType out_dtype, const at::Tensor& x_bias = {},
    bool rows_in_registers = true);
/// Backward kernels' launcher. dy: (N, C) contiguous; d_new_residual: (N, C) contiguous or
/// undefined (zero); x_dtype: x's dtype. Returns {d_residual, dweight, dbias, d_x, d_x_bias},
/// d_x being d_residual itself when x_dtype is residual's, d_x_bias undefined unless x_bias_grad.
/// x_bias_sums_in_registers = false sums d_x_bias in shared memory, as wider rows do, even where
/// the kernel could keep those sums in registers (tests and the bench compare the two: the same
/// bits).
std::vector<at::Tensor> residual_layernorm_backward_cuda(
    const at::Tensor& dy, const at::Tensor& d_new_residual, const at::Tensor& new_residual,
    const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& rstd,
    at::ScalarType x_dtype, bool x_bias_grad = false, bool x_bias_sums_in_registers = true);
/// Whether this build has the CUDA kernels.
bool residual_layernorm_cuda_built();
}  // namespace detail

}  // namespace brrr
