#pragma once
// Op `fused_classifier`: the language model's cross-entropy, F.cross_entropy(logits, targets,
// ignore_index=-100, reduction="mean"), without a float32 copy of the logits and without a second
// logits-sized buffer for their gradient.
//
//   logits:  (N, V) bf16, fp16, float32 or float64, contiguous rows (N = B * T, V = vocabulary)
//   targets: (N,) int64 on logits' device; ignore_index marks rows that do not count
//   returns: 0-dim float32 (float64 for float64 logits): the mean over the rows whose target is
//            not ignore_index of logsumexp(logits[i]) - logits[i, targets[i]]. With no such row
//            it is NaN (0 / 0), as in PyTorch.
//
// Paths: fused_classifier_reference (ATen: log_softmax in float + nll_loss, differentiated by
// autograd; the CPU path and the tests' oracle) and, for CUDA tensors in a build with CUDA, the
// autograd Function below with two kernels (fused_classifier.cu):
//   forward:  one block per row, an online (max, sum of exp) pass in float over the row, saving
//             lse (N,) float; the mean and the count of counted rows are reduced on the device,
//             so the op never waits for the GPU.
//   backward: one block per row, overwriting the logits IN PLACE with
//             (softmax - onehot(target)) * grad_output / n_valid, in logits' dtype, 0 in ignored
//             rows; grad_output and n_valid are read from device memory. That buffer is returned
//             as the logits' gradient.
// Saved for backward: logits (the buffer that becomes the gradient), targets, lse (N,) float,
// n_valid (0-dim float).
//
// Consequences of the in-place backward, on the fused path only:
//   - after backward, the logits tensor holds its gradient: read logits (argmax, accuracy)
//     before backward. Its version counter is bumped, so an autograd node that saved the logits
//     and runs later fails loudly instead of reading the gradient.
//   - backward runs once: a second backward through the same graph (retain_graph) throws.
//   - a leaf logits tensor with requires_grad gets its gradient in its own storage.
// A target outside [0, V) that is not ignore_index makes the loss NaN and that row's gradient
// NaN on the fused path (a kernel cannot throw without a host sync); the reference throws.
//
// Autocast: the op is not on autocast's lists (it is a custom Function, not an ATen op), so
// autocast leaves it alone: it runs in the logits' dtype (bf16 logits from an autocast matmul are
// read as bf16, never copied to float32), accumulates in float and returns a float32 loss. The
// reference casts the logits to float itself, as autocast would for F.cross_entropy.
//
// Kernel invariant: rows are contiguous. Each row is read in 16-byte vectors from its first
// 16-byte-aligned element; the unaligned head and tail (fewer than 16 bytes each) are read one
// element at a time, so any V (50257 too) keeps 16-byte loads for the bulk of the row.
//
// Op `lm_head_loss`: the same loss of the logits hidden W^T, the language model's head and its
// loss as one op, so that the gradient needs no pass over the logits of its own.
//
//   hidden:  (N, C), weight: (V, C), one floating dtype on one device (under autocast both are
//            cast as at::linear's arguments are, leaf weights through autocast's cache)
//   targets, ignore_index, returns: as fused_classifier
//
// Paths: lm_head_loss_reference (at::linear, then fused_classifier_reference) and, for CUDA
// tensors in a build with CUDA, an autograd Function:
//   forward:  logits = hidden W^T (one GEMM, in hidden's dtype); with a gradient to compute, one
//             kernel reads each row twice (the second time from L2) and overwrites it with
//             softmax - onehot(target), unscaled, while it writes the row's loss; without one,
//             fused_classifier's forward kernel reads it once and the logits are freed.
//   backward: d hidden = G W and d W = G^T hidden (G the rewritten logits), each then scaled by
//             grad_output / n_valid in float by a small kernel, rounded once: the scale is known
//             only now and the (N, C) and (V, C) outputs are 65x and 21x smaller than G, so
//             it costs two short passes instead of a read and a write of the logits.
// Saved for backward: hidden, weight, G (the logits buffer), n_valid (0-dim float). G is not
// modified by backward: a second backward (retain_graph) is allowed, unless hidden_is_scratch.
//
// Chunked (0 < chunk_rows < N, with a gradient to compute): the logits of chunk_rows rows at a
// time, in one (chunk_rows, V) buffer reused by every chunk, and each chunk's gradients taken in
// the forward, unscaled: d W summed over the chunks in the accumulator type (float for bf16 and
// half: cuBLAS adds each chunk's product into it, rounding it to float once per chunk), d hidden
// written row by row (into hidden's own buffer with hidden_is_scratch, hidden's version bumped
// after the forward). The backward scales both and rounds each once into the inputs' dtype. The
// (N, V) logits never exist: the op's memory is the chunk buffer plus d W in float (V x C x 4
// bytes) instead of N x V logits, e.g. 196 + 154 MiB instead of 1,572 MiB for GPT-2 at 16 x 1024
// with 2048-row chunks, bought with one more read and write of d W per chunk. Each gradient is
// taken only for an input that requires one: a frozen weight costs no d W GEMMs and no float
// buffer, and hidden without a gradient is left as it was, hidden_is_scratch or not. Saved for
// backward: d hidden, d W, n_valid. Without a gradient the loss is computed chunk by chunk the
// same way.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace brrr {

constexpr int64_t kIgnoreIndex = -100;

/// The op, dispatched on logits' device. Throws DataError naming shapes/dtypes for bad input.
at::Tensor fused_classifier(const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index = kIgnoreIndex);

/// The reference: ATen ops on any device, differentiated by autograd; logits are left intact.
at::Tensor fused_classifier_reference(const at::Tensor& logits, const at::Tensor& targets,
                                      int64_t ignore_index = kIgnoreIndex);

/// The head and its loss, dispatched on hidden's device. Throws DataError naming shapes/dtypes
/// for bad input.
/// hidden_is_scratch: the caller gives hidden up to the op (nothing else reads it after the
/// forward), so the backward writes d hidden into hidden's buffer once d W has read it: one
/// (N, C) tensor less at the backward's peak (24 MiB for GPT-2 at 16 x 1024). hidden's version
/// is bumped (a later reader fails loudly) and a second backward through the graph throws. A
/// hidden of another dtype under autocast, or not contiguous, is copied, and the copy is the
/// scratch. The reference path ignores it.
/// chunk_rows: 0 (or >= N) computes all N rows' logits at once; else the chunked path above. The
/// reference path ignores it. Throws DataError for chunk_rows < 0.
at::Tensor lm_head_loss(const at::Tensor& hidden, const at::Tensor& weight,
                        const at::Tensor& targets, int64_t ignore_index = kIgnoreIndex,
                        bool hidden_is_scratch = false, int64_t chunk_rows = 0);

/// lm_head_loss's reference: at::linear (autocast applies), then fused_classifier_reference.
at::Tensor lm_head_loss_reference(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, int64_t ignore_index = kIgnoreIndex);

namespace detail {
/// lm_head_loss's autograd Function on any device (the CPU runs the kernels' math in ATen ops),
/// without autocast's casts: hidden and weight are used in their own dtype.
at::Tensor lm_head_loss_function(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t ignore_index = kIgnoreIndex,
                                 bool hidden_is_scratch = false, int64_t chunk_rows = 0);

/// lm_head_loss's forward kernel's launcher: overwrites `logits` with softmax - onehot(target)
/// (0 in ignored rows, NaN where the target is out of range) and returns row_loss (N,) as
/// fused_classifier_forward_cuda does.
at::Tensor fused_classifier_forward_grad_cuda(const at::Tensor& logits, const at::Tensor& targets,
                                              int64_t ignore_index);
/// t *= scale in place, in t's accumulator type, rounded once; scale: 0-dim, that type, on t's
/// device (never read on the host).
void scale_cuda_(const at::Tensor& t, const at::Tensor& scale);

/// The autograd Function on any device: the kernels for CUDA tensors, and on the CPU the same
/// two stages written in ATen ops (lse saved, in-place gradient), so its plumbing is tested
/// without a GPU. Arguments as fused_classifier.
at::Tensor fused_classifier_function(const at::Tensor& logits, const at::Tensor& targets,
                                     int64_t ignore_index = kIgnoreIndex);

/// Forward kernel's launcher (fused_classifier.cu); arguments already checked, targets
/// contiguous. Returns {row_loss (N,), lse (N,)} in the accumulator type (float; double for
/// double logits); row_loss is 0 in ignored rows and NaN where the target is out of range.
std::vector<at::Tensor> fused_classifier_forward_cuda(const at::Tensor& logits,
                                                      const at::Tensor& targets,
                                                      int64_t ignore_index);
/// Backward kernel's launcher: overwrites `logits` with its gradient. grad_output and n_valid:
/// 0-dim, lse's dtype, on the device.
void fused_classifier_backward_cuda(const at::Tensor& logits, const at::Tensor& targets,
                                    const at::Tensor& lse, const at::Tensor& grad_output,
                                    const at::Tensor& n_valid, int64_t ignore_index);
/// Whether this build has the CUDA kernels.
bool fused_classifier_cuda_built();
}  // namespace detail

}  // namespace brrr
