#include "models/gpt_block.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/ops/bias_gelu.h"
#include "core/ops/linear_bias.h"

namespace brrr::detail {
namespace {

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// Not layer->forward(x): the C++ frontend's linear runs a (B, T, C) input as a matmul plus a
// separate bias add, where at::linear (what Python's nn.Linear calls) flattens it into one GEMM
// with the bias in the epilogue. On GPT-2 124M the separate adds were 52 kernels and 3 ms of a
// 28 ms step on an H200.
at::Tensor fused_linear(const torch::nn::Linear& layer, const at::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

// x W^T without the layer's bias, which the caller adds after the residual-stream add (there is
// no dropout in between to keep the two apart).
at::Tensor projection_without_bias(const torch::nn::Linear& layer, const at::Tensor& x,
                                   double dropout, bool training) {
  if (dropout > 0.0 && training) {
    throw Error("GPT: a projection's bias can be left to the caller only while dropout is off");
  }
  return at::linear(x, layer->weight);
}

}  // namespace

GptLayerNormImpl::GptLayerNormImpl(int64_t n_embd, bool with_bias) {
  weight = register_parameter("weight", torch::ones({n_embd}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({n_embd}));
}

at::Tensor GptLayerNormImpl::forward(const at::Tensor& x) {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, /*eps=*/1e-5);
}

GptAttentionImpl::GptAttentionImpl(int64_t n_embd, int64_t n_head, double dropout, bool bias,
                                   AttentionBackend backend)
    : c_attn(register_module("c_attn", linear(n_embd, 3 * n_embd, bias))),
      c_proj(register_module("c_proj", linear(n_embd, n_embd, bias))),
      n_head_(n_head),
      dropout_(dropout),
      backend_(backend) {}

at::Tensor GptAttentionImpl::forward(const at::Tensor& x, bool fused_ops, bool without_proj_bias) {
  const int64_t B = x.size(0);
  const int64_t T = x.size(1);
  const int64_t C = x.size(2);
  auto project = [&](const torch::nn::Linear& layer, const at::Tensor& in) {
    return fused_ops ? linear_bias(in, layer->weight, layer->bias) : fused_linear(layer, in);
  };
  const auto qkv = project(c_attn, x).split(C, /*dim=*/2);  // 3 x (B, T, C)
  auto heads = [&](const at::Tensor& t) {
    return t.view({B, T, n_head_, C / n_head_}).transpose(1, 2);  // (B, nh, T, hs)
  };
  const at::Tensor y =
      causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), is_training() ? dropout_ : 0.0,
                       backend_);  // (B, nh, T, hs)
  const at::Tensor merged = y.transpose(1, 2).contiguous().view({B, T, C});
  if (without_proj_bias) return projection_without_bias(c_proj, merged, dropout_, is_training());
  return at::dropout(project(c_proj, merged), dropout_, is_training());
}

GptMlpImpl::GptMlpImpl(int64_t n_embd, double dropout, bool bias)
    : c_fc(register_module("c_fc", linear(n_embd, 4 * n_embd, bias))),
      c_proj(register_module("c_proj", linear(4 * n_embd, n_embd, bias))),
      dropout_(dropout) {}

at::Tensor GptMlpImpl::forward(const at::Tensor& x) {
  const at::Tensor h = at::gelu(fused_linear(c_fc, x), "tanh");  // (B, T, 4C)
  return at::dropout(fused_linear(c_proj, h), dropout_, is_training());
}

at::Tensor GptMlpImpl::forward_fused(const at::Tensor& x, bool without_proj_bias) {
  // The GEMM without its bias; bias and GELU in one pass over the (B, T, 4C) activations, which
  // the backward reads once to give both d(input) and d(bias).
  const at::Tensor pre = at::linear(x, c_fc->weight);  // (B, T, 4C)
  const int64_t rows = pre.numel() / pre.size(-1);
  const at::Tensor h = bias_gelu(pre.view({rows, pre.size(-1)}), c_fc->bias).view(pre.sizes());
  if (without_proj_bias) return projection_without_bias(c_proj, h, dropout_, is_training());
  return at::dropout(linear_bias(h, c_proj->weight, c_proj->bias), dropout_, is_training());
}

GptBlockImpl::GptBlockImpl(int64_t n_embd, int64_t n_head, double dropout, bool bias,
                           AttentionBackend backend)
    : ln_1(register_module("ln_1", std::make_shared<GptLayerNormImpl>(n_embd, bias))),
      attn(register_module(
          "attn", std::make_shared<GptAttentionImpl>(n_embd, n_head, dropout, bias, backend))),
      ln_2(register_module("ln_2", std::make_shared<GptLayerNormImpl>(n_embd, bias))),
      mlp(register_module("mlp", std::make_shared<GptMlpImpl>(n_embd, dropout, bias))) {}

at::Tensor GptBlockImpl::forward(const at::Tensor& x) {
  const at::Tensor h = x + attn->forward(ln_1->forward(x));
  return h + mlp->forward(ln_2->forward(h));
}

}  // namespace brrr::detail
