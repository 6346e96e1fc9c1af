#pragma once
// The pieces of a GPT-2 transformer block (models/gpt.h), with nanoGPT's module names:
// ln_1, attn.{c_attn, c_proj}, ln_2, mlp.{c_fc, c_proj}. Internal to the models layer.
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "models/attention.h"

namespace brrr::detail {

/// LayerNorm over the last dim with an optional bias (torch::nn::LayerNorm always has one; GPT
/// configs with bias=false have none). Parameters: weight (C,) = 1 and, with bias, bias (C,) = 0.
class GptLayerNormImpl : public torch::nn::Module {
 public:
  GptLayerNormImpl(int64_t n_embd, bool with_bias);
  at::Tensor forward(const at::Tensor& x);  // (..., C) -> (..., C)

  at::Tensor weight;  // (C,)
  at::Tensor bias;    // (C,) or undefined
};

/// Causal multi-head self-attention: c_attn (C -> 3C), SDPA with is_causal, c_proj (C -> C).
class GptAttentionImpl : public torch::nn::Module {
 public:
  GptAttentionImpl(int64_t n_embd, int64_t n_head, double dropout, bool bias,
                   AttentionBackend backend);
  /// fused_ops: the linears as ops::linear_bias (bias gradients by brrr's column-sum kernel).
  /// without_proj_bias: c_proj's GEMM without its bias, for the caller to add (as
  /// ops::residual_layernorm's x_bias); only while dropout is inactive (it would come between).
  at::Tensor forward(const at::Tensor& x, bool fused_ops = false,
                     bool without_proj_bias = false);  // (B, T, C) -> (B, T, C)

  torch::nn::Linear c_attn{nullptr};
  torch::nn::Linear c_proj{nullptr};

 private:
  int64_t n_head_;
  double dropout_;
  AttentionBackend backend_;
};

/// Position-wise MLP: c_fc (C -> 4C), GELU (tanh approximation), c_proj (4C -> C), dropout.
class GptMlpImpl : public torch::nn::Module {
 public:
  GptMlpImpl(int64_t n_embd, double dropout, bool bias);
  at::Tensor forward(const at::Tensor& x);  // (B, T, C) -> (B, T, C)
  /// The same with c_fc's bias and the GELU in one op (ops::bias_gelu), c_proj as
  /// ops::linear_bias; needs bias. without_proj_bias: as GptAttentionImpl::forward's.
  at::Tensor forward_fused(const at::Tensor& x,
                           bool without_proj_bias = false);  // (B, T, C) -> (B, T, C)

  torch::nn::Linear c_fc{nullptr};
  torch::nn::Linear c_proj{nullptr};

 private:
  double dropout_;
};

/// Pre-LayerNorm residual block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
class GptBlockImpl : public torch::nn::Module {
 public:
  GptBlockImpl(int64_t n_embd, int64_t n_head, double dropout, bool bias, AttentionBackend backend);
  at::Tensor forward(const at::Tensor& x);  // (B, T, C) -> (B, T, C)

  std::shared_ptr<GptLayerNormImpl> ln_1;
  std::shared_ptr<GptAttentionImpl> attn;
  std::shared_ptr<GptLayerNormImpl> ln_2;
  std::shared_ptr<GptMlpImpl> mlp;
};

}  // namespace brrr::detail
