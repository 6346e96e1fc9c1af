#include "models/gpt.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.h"
#include "core/ops/fused_classifier.h"
#include "core/ops/residual_layernorm.h"
#include "models/gpt_block.h"

namespace brrr {
namespace {

constexpr double kInitStd = 0.02;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check_options(const ModelOptions& o) {
  auto positive = [](const char* key, int64_t v) {
    if (v <= 0) throw ConfigError(fmt::format("gpt: model.{} must be > 0, got {}", key, v));
  };
  positive("n_layer", o.n_layer);
  positive("n_head", o.n_head);
  positive("n_embd", o.n_embd);
  positive("block_size", o.block_size);
  positive("vocab_size", o.vocab_size);
  if (o.n_embd % o.n_head != 0) {
    throw ConfigError(fmt::format("gpt: model.n_embd ({}) must be a multiple of model.n_head ({})",
                                  o.n_embd, o.n_head));
  }
  if (o.dropout < 0.0 || o.dropout >= 1.0) {
    throw ConfigError(fmt::format("gpt: model.dropout must be in [0, 1), got {}", o.dropout));
  }
}

}  // namespace

Gpt::Gpt(const ModelOptions& options)
    : options_(options),
      fused_(options.fused != "false" && options.bias),
      attention_(parse_attention_backend(options.attention)) {
  check_options(options_);
  const int64_t C = options_.n_embd;
  auto transformer = register_module("transformer", std::make_shared<torch::nn::Module>());
  wte_ = transformer->register_module("wte", torch::nn::Embedding(options_.vocab_size, C));
  wpe_ = transformer->register_module("wpe", torch::nn::Embedding(options_.block_size, C));
  h_ = transformer->register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.n_layer; ++i) {
    h_->push_back(std::make_shared<detail::GptBlockImpl>(C, options_.n_head, options_.dropout,
                                                         options_.bias, attention_));
  }
  ln_f_ = transformer->register_module(
      "ln_f", std::make_shared<detail::GptLayerNormImpl>(C, options_.bias));

  auto lm_head = register_module("lm_head", std::make_shared<torch::nn::Module>());
  if (options_.tie_embeddings) {
    lm_head_weight_ = lm_head->register_buffer("weight", wte_->weight);  // see gpt.h
  } else {
    lm_head_weight_ = lm_head->register_parameter("weight", torch::empty({options_.vocab_size, C}));
  }

  // GPT-2 initialisation. Residual projections are scaled so that the variance added to the
  // residual stream by 2 n_layer sublayers stays O(1).
  at::NoGradGuard no_grad;
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(options_.n_layer));
  for (auto& p : named_parameters(/*recurse=*/true)) {
    const std::string& name = p.key();
    if (ends_with(name, "c_proj.weight")) {
      p.value().normal_(0.0, residual_std);
    } else if (ends_with(name, ".bias")) {
      p.value().zero_();
    } else if (name.find(".ln_") == std::string::npos) {  // LayerNorm weights stay 1
      p.value().normal_(0.0, kInitStd);
    }
  }
}

at::Tensor Gpt::forward(const at::Tensor& input) {
  return at::linear(final_hidden(input), lm_head_weight_);  // (B, T, V)
}

at::Tensor Gpt::language_model_loss(const at::Tensor& input, const at::Tensor& targets,
                                    bool fused) {
  if (!(fused && fused_)) return Model::language_model_loss(input, targets, fused);
  const at::Tensor h = final_hidden(input);  // (B, T, C)
  // ln_f's output is read by nothing but the head (its backward keeps the stream, not it): the
  // head's backward may write d hidden into it.
  return lm_head_loss(h.reshape({-1, h.size(-1)}), lm_head_weight_, targets.reshape({-1}),
                      kIgnoreIndex, /*hidden_is_scratch=*/true, options_.head_chunk_rows);
}

std::vector<std::string> Gpt::fused_ops() const {
  if (!fused_) return {};
  return {"residual_layernorm", "linear_bias", "bias_gelu", "lm_head_loss"};
}

at::Tensor Gpt::final_hidden(const at::Tensor& input) {
  if (input.dim() != 2 || !at::isIntegralType(input.scalar_type(), /*includeBool=*/false) ||
      input.size(1) > options_.block_size) {
    throw Error(fmt::format(
        "gpt: expected int64 tokens (B, T) with T <= block_size {}, got {} [{}]",
        options_.block_size, c10::toString(input.scalar_type()), fmt::join(input.sizes(), ", ")));
  }
  const int64_t T = input.size(1);
  const at::Tensor pos = at::arange(T, input.options().dtype(at::kLong));  // (T,)
  const at::Tensor tok = wte_->forward(input);                             // (B, T, C)
  const at::Tensor pos_emb = wpe_->forward(pos);                           // (T, C)
  if (fused_) return forward_fused(tok, pos_emb);
  at::Tensor x = at::dropout(tok + pos_emb, options_.dropout, is_training());
  for (const auto& block : *h_) x = block->as<detail::GptBlockImpl>()->forward(x);  // (B, T, C)
  return ln_f_->forward(x);
}

at::Tensor Gpt::forward_fused(const at::Tensor& tok, const at::Tensor& pos_emb) {
  const int64_t B = tok.size(0), T = tok.size(1), C = tok.size(2);
  // The dtype the matmuls run in: autocast's, else the activations'.
  const c10::DeviceType type = tok.device().type();
  const at::ScalarType compute = at::autocast::is_autocast_enabled(type)
                                     ? at::autocast::get_autocast_dtype(type)
                                     : tok.scalar_type();
  auto rows = [&](const at::Tensor& t) { return t.reshape({B * T, C}); };  // (N, C)
  auto blocks = [&](const at::Tensor& t) { return t.view({B, T, C}); };    // (B, T, C)
  // Block i: y = ln_1(res); res += attn(y); y = ln_2(res); res += mlp(y); the last two steps of a
  // block and the first of the next are each one residual_layernorm, the last one with ln_f. The
  // branches' outputs go in as the matmuls leave them (bf16 under autocast): the op adds them to
  // the float32 stream in float. Without dropout the branches' c_proj GEMMs leave out their bias
  // and the op adds it (x_bias): its gradient then comes from the op's backward pass over d(x),
  // not from a column-sum kernel reading d(x) again.
  detail::GptLayerNormImpl& ln_0 = *h_->at<detail::GptBlockImpl>(0).ln_1;
  at::Tensor res, y;  // (N, C): the stream in float32, the normalised rows in `compute`
  // Active dropout sits between each add and the next LayerNorm: then no add is fused into it.
  const bool dropout = options_.dropout > 0.0 && is_training();
  if (dropout) {
    res = rows(at::dropout(tok + pos_emb, options_.dropout, /*train=*/true));
    y = ln_0.forward(res).to(compute);
  } else {  // the embeddings' add is the first residual_layernorm's
    std::tie(res, y) = residual_layernorm(rows(tok), rows(pos_emb.expand({B, T, C})), ln_0.weight,
                                          ln_0.bias, 1e-5, compute);
  }
  const bool defer = !dropout;  // the c_proj biases go to residual_layernorm
  const int64_t n = static_cast<int64_t>(h_->size());
  for (int64_t i = 0; i < n; ++i) {
    auto& block = h_->at<detail::GptBlockImpl>(static_cast<size_t>(i));
    const at::Tensor a = rows(block.attn->forward(blocks(y), /*fused_ops=*/true, defer));
    std::tie(res, y) = residual_layernorm(res, a, block.ln_2->weight, block.ln_2->bias, 1e-5,
                                          compute, defer ? block.attn->c_proj->bias : at::Tensor());
    const at::Tensor m = rows(block.mlp->forward_fused(blocks(y), defer));
    const detail::GptLayerNormImpl& next =
        i + 1 < n ? *h_->at<detail::GptBlockImpl>(static_cast<size_t>(i + 1)).ln_1 : *ln_f_;
    std::tie(res, y) = residual_layernorm(res, m, next.weight, next.bias, 1e-5, compute,
                                          defer ? block.mlp->c_proj->bias : at::Tensor());
  }
  return blocks(y);
}

int64_t Gpt::num_non_embedding_parameters() const {
  return count_parameters(*this) - wpe_->weight.numel();
}

double Gpt::flops_per_example() const {
  // PaLM appendix B / nanoGPT estimate_mfu: 6 N per token for the matmuls (fwd + bwd) plus
  // 12 L C T for attention scores and values. The input-embedding lookup does no matmul work, so
  // an untied wte is excluded too (tied, it is the output head and counts).
  int64_t n = num_non_embedding_parameters();
  if (!options_.tie_embeddings) n -= wte_->weight.numel();
  const double T = static_cast<double>(options_.block_size);
  const double per_token =
      6.0 * static_cast<double>(n) +
      12.0 * static_cast<double>(options_.n_layer) * static_cast<double>(options_.n_embd) * T;
  return per_token * T;
}

std::string Gpt::describe() const {
  return describe_with(fmt::format(
      "gpt (n_layer {}, n_head {}, n_embd {}, block_size {}, vocab_size {}, bias {}, tied {}; "
      "{}, attention {})",
      options_.n_layer, options_.n_head, options_.n_embd, options_.block_size, options_.vocab_size,
      options_.bias, options_.tie_embeddings,
      fused_ ? fmt::format("fused (c_proj bias+)residual+layernorm, bias+gelu, linear bias "
                           "gradients, head+loss{}",
                           options_.head_chunk_rows > 0
                               ? fmt::format(" in chunks of {} rows", options_.head_chunk_rows)
                               : "")
             : "unfused ATen ops",
      to_string(attention_)));
}

}  // namespace brrr
