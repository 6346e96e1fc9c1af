#pragma once
// `gpt`: the GPT-2 family as in nanoGPT — token + position embeddings, n_layer pre-LayerNorm
// blocks (causal self-attention through ATen's fused SDPA kernels, backend per model.attention;
// MLP 4x with tanh-GELU), final ln_f and an lm_head tied to wte. With model.fused (and biases)
// the residual add + LayerNorm and the bias + GELU run as fused ops (core/ops); the unfused
// composition stays the reference path.
//
// Names (PyTorch state_dict of nanoGPT): transformer.wte.weight, transformer.wpe.weight,
// transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight,bias},
// transformer.ln_f.{weight,bias}, lm_head.weight.
// Invariant: with tie_embeddings, lm_head.weight is the very tensor transformer.wte.weight. It is
// registered as a *buffer* of lm_head (not a second parameter), so parameters() lists it once
// (optimizers step it once, gradients from both uses accumulate into it) while named_state()
// and checkpoints still carry PyTorch's `lm_head.weight` key.
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include "core/config.h"
#include "models/attention.h"
#include "models/model.h"

namespace brrr {
namespace detail {
class GptLayerNormImpl;
}

class Gpt : public Model {
 public:
  /// Uses n_layer, n_head, n_embd, block_size, vocab_size, dropout, bias, tie_embeddings.
  /// Initialisation (GPT-2): Linear/Embedding weights N(0, 0.02), residual projections
  /// (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weights 1.
  /// Throws ConfigError naming the `model.*` key of an invalid value.
  explicit Gpt(const ModelOptions& options);

  /// tokens (B, T) int64, T <= block_size -> logits (B, T, vocab_size).
  at::Tensor forward(const at::Tensor& input) override;
  /// With `fused` and the fused blocks, the head and the loss are one op (ops::lm_head_loss): the
  /// logits never leave it and their gradient needs no pass of its own; else as Model's.
  at::Tensor language_model_loss(const at::Tensor& input, const at::Tensor& targets,
                                 bool fused) override;
  Task task() const override { return Task::kLanguageModel; }
  /// With fused(): residual_layernorm, linear_bias, bias_gelu, lm_head_loss.
  std::vector<std::string> fused_ops() const override;
  /// Per sequence of block_size tokens: (6 N + 12 n_layer n_embd block_size) * block_size, N the
  /// parameters that do matmul work (all but wpe, and but wte when it is not the head).
  double flops_per_example() const override;
  std::string describe() const override;

  /// Parameters without the position embedding (nanoGPT's get_num_params(non_embedding=True)).
  int64_t num_non_embedding_parameters() const;

  /// Whether forward() runs the fused ops (model.fused not `false` and the model has biases).
  bool fused() const { return fused_; }

 private:
  /// tokens (B, T) -> ln_f's output (B, T, C), in the compute dtype on the fused path. Throws
  /// brrr::Error naming the shape/dtype of input that does not fit.
  at::Tensor final_hidden(const at::Tensor& input);

  /// The blocks with residual add + LayerNorm and bias + GELU fused (brrr::ops): the residual
  /// stream stays float32, each LayerNorm's output is in the compute dtype.
  // tok: (B, T, C) token embeddings, pos_emb: (T, C) -> (B, T, C) ln_f output in the compute dtype
  at::Tensor forward_fused(const at::Tensor& tok, const at::Tensor& pos_emb);

  ModelOptions options_;
  torch::nn::Embedding wte_{nullptr};  // (vocab_size, n_embd)
  torch::nn::Embedding wpe_{nullptr};  // (block_size, n_embd)
  torch::nn::ModuleList h_;            // n_layer detail::GptBlock
  std::shared_ptr<detail::GptLayerNormImpl> ln_f_;
  at::Tensor lm_head_weight_;  // (vocab_size, n_embd); wte_->weight when tied
  bool fused_ = false;
  AttentionBackend attention_ = AttentionBackend::kAuto;
};

}  // namespace brrr
