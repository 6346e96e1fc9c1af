#pragma once
// Op `batch_norm_act`: a convolutional network's "batch norm, then add the shortcut, then ReLU"
// (ResNet's bn -> relu and bn3 + identity -> relu) in one pass forward and one backward.
//
//   x:            (N, C, H, W) float32, bf16 or fp16 (a convolution's output; under autocast the
//                 convolution leaves bf16/fp16)
//   residual:     x's shape and dtype, or undefined: added after the normalisation, before the
//                 ReLU (the block's shortcut)
//   weight, bias: (C,) float32: the norm's gamma and beta
//   running_mean, running_var: (C,) float32 buffers, or both undefined. In training they are
//                 updated in place as torch.nn.BatchNorm2d does (new = (1 - momentum) old +
//                 momentum batch, the variance unbiased); in evaluation they normalise.
//   training:     batch statistics (biased variance) and running-buffer updates, else the
//                 running statistics
//   relu:         apply max(0, .) last
//   returns y:    x's shape, dtype and memory format,
//                 y = relu((x - mean[c]) * rsqrt(var[c] + eps) * weight[c] + bias[c] + residual)
//                 computed in float32 and rounded once to x's dtype.
//
// Paths: batch_norm_act_reference (ATen: at::batch_norm, the add, at::relu; differentiated by
// autograd; the CPU path, the evaluation path, the path under deterministic algorithms
// (train.deterministic), and the tests' oracle) and, for channels-last bf16 or fp16 CUDA
// tensors in training with relu, in a build with cuDNN, the autograd Function below: one
// cuDNN call each way (batch_norm_act_cudnn.cpp: cudnnBatchNormalizationForwardTrainingEx and
// BackwardEx in the NHWC persistent mode, with CUDNN_BATCHNORM_OPS_BN_ACTIVATION or
// _BN_ADD_ACTIVATION), so neither the normalised tensor nor the sum before the ReLU is ever
// written: eager PyTorch writes and reads both (3 kernels forward, 3 backward). Shapes cuDNN
// has no fused kernel for take the reference (detail::BatchNormActUnsupported).
// The cuDNN path runs inside a captured CUDA graph too (train.cuda_graph): nothing in it waits
// on the host, and its workspace and reserve space come from the caching allocator, so from the
// graph's pool.
// Saved for backward (fused path): x, y, weight, bias, the batch mean and inverse standard
// deviation (C,) in float32, and cuDNN's reserve space (the ReLU's mask). No double backward.
// Autocast does not see this op (a custom Function): it runs in the dtypes given.
#include <ATen/core/Tensor.h>

#include <vector>

#include "core/error.h"

namespace brrr {

/// Where batch_norm_act runs for these arguments: "cudnn" or "reference".
const char* batch_norm_act_path(const at::Tensor& x, bool training);

/// The op, dispatched as batch_norm_act_path says. Throws DataError naming shapes/dtypes for
/// bad input.
at::Tensor batch_norm_act(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& running_mean,
                          const at::Tensor& running_var, bool training, double momentum,
                          double eps, bool relu);

/// The reference: ATen ops on any device, differentiated by autograd.
at::Tensor batch_norm_act_reference(const at::Tensor& x, const at::Tensor& residual,
                                    const at::Tensor& weight, const at::Tensor& bias,
                                    const at::Tensor& running_mean, const at::Tensor& running_var,
                                    bool training, double momentum, double eps, bool relu);

namespace detail {
/// Whether this build calls cuDNN's fused batch norm (cuDNN's headers were found).
bool batch_norm_act_cudnn_built();

/// What the cuDNN path throws when cuDNN has no kernel for these arguments
/// (CUDNN_STATUS_NOT_SUPPORTED, before it ran anything): batch_norm_act then takes the reference
/// for them, and remembers the shape, so later calls go there directly.
struct BatchNormActUnsupported : Error {
  using Error::Error;
};

/// cuDNN's forward in training, ReLU last (batch_norm_act_cudnn.cpp); arguments checked, x
/// channels-last bf16/fp16 on CUDA. Updates the running buffers when defined. Returns {y, mean,
/// invstd, reserve}.
std::vector<at::Tensor> batch_norm_act_forward_cudnn(const at::Tensor& x,
                                                     const at::Tensor& residual,
                                                     const at::Tensor& weight,
                                                     const at::Tensor& bias,
                                                     const at::Tensor& running_mean,
                                                     const at::Tensor& running_var,
                                                     double momentum, double eps);

/// cuDNN's backward: {dx, d_residual (undefined without a residual), dweight, dbias}.
std::vector<at::Tensor> batch_norm_act_backward_cudnn(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
    const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd,
    const at::Tensor& reserve, double eps, bool with_residual);
}  // namespace detail

}  // namespace brrr
