#pragma once
// Causal self-attention through ATen's scaled-dot-product-attention kernels, with the backend
// chosen by `model.attention` rather than by ATen's dispatcher:
//   flash      at::_scaled_dot_product_flash_attention (FlashAttention-2)
//   cudnn      at::_scaled_dot_product_cudnn_attention (cuDNN's fused attention)
//   efficient  at::_scaled_dot_product_efficient_attention (memory-efficient, xFormers')
//   math       at::_scaled_dot_product_attention_math (the unfused composition)
//   auto       cudnn for bf16/fp16 on compute capability 9.0+ (measured fastest there:
//              bench/RESULTS.md), otherwise at::scaled_dot_product_attention's own choice;
//              flash for bf16/fp16 under set_deterministic(true) (core/determinism.h), where
//              ATen runs flash's backward in a fixed order (and cudnn is refused: its backward
//              is not reproducible).
// A named fused backend runs only where it can (CUDA, bf16/fp16 inputs for flash and cudnn);
// elsewhere (the CPU, fp32 inputs) at::scaled_dot_product_attention chooses, so a config that
// names a backend still runs on a CPU. All of them have ATen's backward.
#include <ATen/core/Tensor.h>

#include <string>

namespace brrr {

enum class AttentionBackend { kAuto, kFlash, kCudnn, kEfficient, kMath };

/// `auto`, `flash`, `cudnn`, `efficient`, `math`; ConfigError naming model.attention otherwise.
AttentionBackend parse_attention_backend(const std::string& name);
const char* to_string(AttentionBackend backend);

/// The backend that causal_attention runs for inputs of `dtype` on `device`.
AttentionBackend resolve_attention_backend(AttentionBackend requested, const c10::Device& device,
                                           at::ScalarType dtype);

/// q, k, v: (B, nh, T, hs) -> (B, nh, T, hs), causal, with dropout probability `dropout_p`.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double dropout_p, AttentionBackend backend);

}  // namespace brrr
