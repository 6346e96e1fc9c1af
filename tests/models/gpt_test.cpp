#include "models/gpt.h"

#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/determinism.h"
#include "core/error.h"
#include "core/precision.h"
#include "models/attention.h"
#include "models/state_dict.h"
#include "tests/models/golden_test_util.h"

namespace brrr {
namespace {

ModelOptions gpt_options(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t block_size,
                         int64_t vocab_size) {
  ModelOptions o;
  o.name = "gpt";
  o.n_layer = n_layer;
  o.n_head = n_head;
  o.n_embd = n_embd;
  o.block_size = block_size;
  o.vocab_size = vocab_size;
  o.dropout = 0.0;
  return o;
}

TEST(GptTest, MatchesPyTorchLogitsAndGradients) {
  Gpt model(gpt_options(2, 4, 64, 16, 96));
  test::expect_matches_golden(model, test::load_golden("models_gpt.pt"));
}

TEST(GptTest, WithoutBiasAndUntiedMatchesPyTorch) {
  auto o = gpt_options(1, 4, 64, 16, 96);
  o.bias = false;
  o.tie_embeddings = false;
  Gpt model(o);
  EXPECT_EQ(named_state(model).count("transformer.h.0.attn.c_attn.bias"), 0u);
  test::expect_matches_golden(model, test::load_golden("models_gpt_nobias_untied.pt"));
}

TEST(GptTest, Gpt2SmallHas124MParametersWithTiedHead) {
  Gpt model(gpt_options(12, 12, 768, 1024, 50257));
  EXPECT_EQ(count_parameters(model), 124'439'808);
  EXPECT_EQ(count_parameters(model), test::golden_count("gpt2_params"));
  EXPECT_EQ(model.num_non_embedding_parameters(),
            test::golden_count("gpt2_params") - test::golden_count("gpt2_wpe"));
  // nanoGPT estimate_mfu: per token 6 N + 12 L C T, per example x T.
  const double n = 124'439'808.0 - 1024.0 * 768.0;
  EXPECT_DOUBLE_EQ(model.flops_per_example(), (6.0 * n + 12.0 * 12 * 768 * 1024) * 1024);
}

TEST(GptTest, TiedHeadIsOneTensorListedOnceAndTrainedThroughBothUses) {
  Gpt model(gpt_options(1, 2, 16, 8, 32));
  const auto state = named_state(model);
  const at::Tensor wte = state.at("transformer.wte.weight");
  EXPECT_TRUE(state.at("lm_head.weight").is_same(wte));
  int listed = 0;
  for (const auto& p : model.parameters()) listed += p.is_same(wte) ? 1 : 0;
  EXPECT_EQ(listed, 1);

  // Token 31 is not in the input: its wte row gets gradient only through the head.
  const at::Tensor tokens = torch::randint(0, 31, {2, 8}, at::kLong);
  model.forward(tokens).sum().backward();
  EXPECT_GT(wte.grad()[31].abs().sum().item<double>(), 0.0);
}

TEST(GptTest, InitialisationFollowsGpt2) {
  torch::manual_seed(1);
  Gpt model(gpt_options(4, 4, 256, 64, 256));
  const auto params = model.named_parameters();
  auto std_of = [&](const std::string& name) { return params[name].std().item<double>(); };
  const double residual = 0.02 / std::sqrt(2.0 * 4);
  EXPECT_NEAR(std_of("transformer.h.3.attn.c_proj.weight"), residual, 0.03 * residual);
  EXPECT_NEAR(std_of("transformer.h.3.mlp.c_proj.weight"), residual, 0.03 * residual);
  EXPECT_NEAR(std_of("transformer.h.0.attn.c_attn.weight"), 0.02, 0.03 * 0.02);
  EXPECT_NEAR(std_of("transformer.h.0.mlp.c_fc.weight"), 0.02, 0.03 * 0.02);
  EXPECT_NEAR(std_of("transformer.wte.weight"), 0.02, 0.03 * 0.02);
  EXPECT_NEAR(std_of("transformer.wpe.weight"), 0.02, 0.03 * 0.02);
  EXPECT_TRUE(params["transformer.h.1.attn.c_attn.bias"].eq(0).all().item<bool>());
  EXPECT_TRUE(params["transformer.h.1.mlp.c_proj.bias"].eq(0).all().item<bool>());
  EXPECT_TRUE(params["transformer.ln_f.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(params["transformer.h.2.ln_1.bias"].eq(0).all().item<bool>());
}

TEST(GptTest, LossAtInitialisationIsNearLogVocab) {
  torch::manual_seed(2);
  Gpt model(gpt_options(2, 4, 64, 32, 256));
  const at::Tensor tokens = torch::randint(0, 256, {8, 33}, at::kLong);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.forward(tokens.narrow(1, 0, 32));  // (8, 32, 256)
  const double loss =
      at::cross_entropy_loss(logits.reshape({-1, 256}), tokens.narrow(1, 1, 32).reshape({-1}))
          .item<double>();
  EXPECT_NEAR(loss, std::log(256.0), 0.1);
}

// The names of the ATen operators the calling thread runs while `fn` runs.
template <typename Fn>
std::vector<std::string> ops_run_by(Fn&& fn) {
  static thread_local std::vector<std::string>* sink = nullptr;
  std::vector<std::string> names;
  sink = &names;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& f)
                                     -> std::unique_ptr<at::ObserverContext> {
        if (sink != nullptr) sink->emplace_back(f.name());
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}));
  fn();
  at::removeCallback(handle);
  sink = nullptr;
  return names;
}

TEST(GptTest, LinearsAreOneGemmWithTheBiasFused) {
  // A (B, T, C) input must reach addmm (bias in the GEMM), not matmul + a separate add: that add
  // was 52 extra kernels per GPT-2 step on the GPU. (The unfused path; the fused one keeps
  // c_fc's bias for its bias+GELU op.)
  auto o = gpt_options(1, 2, 16, 8, 32);
  o.fused = "false";
  Gpt model(o);
  const at::Tensor tokens = at::randint(32, {2, 8}, at::kLong);
  const auto names = ops_run_by([&] { model.forward(tokens); });
  auto count = [&](const std::string& op) { return std::count(names.begin(), names.end(), op); };
  EXPECT_EQ(count("aten::matmul"), 1) << "only the untied-bias-free head may use matmul";
  EXPECT_EQ(count("aten::add_"), 0);
  EXPECT_EQ(count("aten::addmm"), 4) << "c_attn, attn.c_proj, c_fc, mlp.c_proj";
}

// The fused path (residual add + LayerNorm, bias + GELU as brrr::ops; their ATen references on
// the CPU) computes the unfused model: logits and every gradient within float32 rounding.
TEST(GptTest, FusedPathEqualsUnfusedOnCpu) {
  // Without dropout the embeddings' add is the first residual_layernorm; with it (training) the
  // add, the dropout and ln_1 stay apart. The same seed draws the same masks in both paths.
  for (double dropout : {0.0, 0.2}) {
    SCOPED_TRACE("dropout " + std::to_string(dropout));
    auto o = gpt_options(3, 4, 64, 16, 96);
    o.dropout = dropout;
    torch::manual_seed(21);
    Gpt fused(o);
    o.fused = "false";
    torch::manual_seed(21);
    Gpt plain(o);
    ASSERT_TRUE(fused.fused());
    ASSERT_FALSE(plain.fused());
    const at::Tensor tokens = torch::randint(0, 96, {3, 16}, at::kLong);
    const at::Tensor targets = torch::randint(0, 96, {3 * 16}, at::kLong);
    auto loss_of = [&](Gpt& m) {
      torch::manual_seed(7);
      const at::Tensor logits = m.forward(tokens);
      const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 96}), targets);
      loss.backward();
      return logits.detach();
    };
    test::expect_close(loss_of(fused), loss_of(plain), "logits", 1e-5, 1e-6);
    const auto a = fused.named_parameters();
    const auto b = plain.named_parameters();
    for (const auto& p : a) {
      test::expect_close(p.value().grad(), b[p.key()].grad(), "grad of " + p.key(), 1e-4, 1e-6);
    }
  }
}

TEST(GptTest, FusedPathRoutesLayerNormsAndTheFcBiasThroughTheOps) {
  Gpt model(gpt_options(2, 2, 16, 8, 32));
  const at::Tensor tokens = at::randint(32, {2, 8}, at::kLong);
  const auto names = ops_run_by([&] { model.forward(tokens); });
  auto count = [&](const std::string& op) { return std::count(names.begin(), names.end(), op); };
  EXPECT_EQ(count("aten::layer_norm"), 1 + 2 * 2)
      << "on the CPU the fused ops run their ATen references (one layer_norm each); the first "
         "one adds the embeddings";
  EXPECT_EQ(count("aten::addmm"), 2 * 1)
      << "c_attn keeps its bias; both c_proj biases are added by residual_layernorm (x_bias)";
  // Under dropout in training the branch output is dropped out before the add: the c_proj
  // linears keep their bias.
  auto o = gpt_options(2, 2, 16, 8, 32);
  o.dropout = 0.1;
  Gpt dropped(o);
  const auto with_dropout = ops_run_by([&] { dropped.forward(tokens); });
  EXPECT_EQ(std::count(with_dropout.begin(), with_dropout.end(), "aten::addmm"), 2 * 3);
}

TEST(GptTest, AttentionIsCausal) {
  torch::manual_seed(4);
  Gpt model(gpt_options(2, 2, 32, 16, 50));
  model.eval();
  at::NoGradGuard no_grad;
  const at::Tensor a = torch::randint(0, 50, {1, 16}, at::kLong);
  at::Tensor b = a.clone();
  b[0][10] = (a[0][10].item<int64_t>() + 1) % 50;
  const at::Tensor la = model.forward(a);
  const at::Tensor lb = model.forward(b);
  EXPECT_TRUE(la.narrow(1, 0, 10).equal(lb.narrow(1, 0, 10)));
  EXPECT_FALSE(la.narrow(1, 10, 6).equal(lb.narrow(1, 10, 6)));
  // Shorter inputs than block_size use the first positions.
  EXPECT_TRUE(model.forward(a.narrow(1, 0, 5)).allclose(la.narrow(1, 0, 5), 1e-5, 1e-6));
}

TEST(GptTest, CudaForwardMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(5);
  Gpt model(gpt_options(2, 4, 64, 64, 128));
  model.eval();
  at::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(0, 128, {4, 64}, at::kLong);
  const at::Tensor cpu = model.forward(tokens);
  model.to(torch::kCUDA);
  EXPECT_TRUE(named_state(model).at("lm_head.weight").is_cuda());
  const at::Tensor cuda = model.forward(tokens.to(torch::kCUDA)).cpu();
  test::expect_close(cuda, cpu, "cuda logits", 1e-3, 1e-3);
}

// On the GPU the fused path's kernels under bf16 autocast against the unfused ATen path: the
// same logits and gradients to bf16 accuracy.
TEST(GptTest, CudaFusedMatchesUnfusedUnderBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto o = gpt_options(2, 4, 64, 64, 1000);
  torch::manual_seed(8);
  Gpt fused(o);
  o.fused = "false";
  torch::manual_seed(8);
  Gpt plain(o);
  fused.to(torch::kCUDA);
  plain.to(torch::kCUDA);
  const at::Tensor tokens = torch::randint(0, 1000, {4, 64}, at::kLong).to(torch::kCUDA);
  const at::Tensor targets = torch::randint(0, 1000, {4 * 64}, at::kLong).to(torch::kCUDA);
  auto run = [&](Gpt& m) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    const at::Tensor logits = m.forward(tokens).to(at::kFloat);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
    at::cross_entropy_loss(logits.reshape({-1, 1000}), targets).backward();
    return logits.detach().cpu();
  };
  test::expect_close(run(fused), run(plain), "bf16 logits", 2e-2, 2e-2);
  const auto a = fused.named_parameters();
  const auto b = plain.named_parameters();
  for (const auto& p : a) {
    const at::Tensor g = p.value().grad().cpu(), ref = b[p.key()].grad().cpu();
    const double rel = (g - ref).norm().item<double>() / (ref.norm().item<double>() + 1e-12);
    EXPECT_LT(rel, 3e-2) << "grad of " << p.key();
  }
  // Every attention backend gives the same model (the unfused one's math backend under autocast
  // included).
  for (const char* backend : {"flash", "cudnn", "efficient", "math"}) {
    auto ob = o;
    ob.attention = backend;
    torch::manual_seed(8);
    Gpt other(ob);
    other.to(torch::kCUDA);
    test::expect_close(run(other), run(plain), std::string("logits with ") + backend, 2e-2, 2e-2);
  }
}

// model.head_chunk_rows on the GPU: the head + loss in chunks of rows (gradients taken in the
// forward, d W summed in float) trains the same model as the one-chunk op, under bf16 autocast.
TEST(GptTest, CudaHeadInChunksMatchesOneChunk) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto o = gpt_options(2, 4, 64, 64, 1000);
  const at::Tensor tokens = torch::randint(0, 1000, {4, 64}, at::kLong).to(torch::kCUDA);
  const at::Tensor targets = torch::randint(0, 1000, {4, 64}, at::kLong).to(torch::kCUDA);
  auto run = [&](int64_t chunk_rows) {
    o.head_chunk_rows = chunk_rows;
    torch::manual_seed(8);
    auto m = std::make_shared<Gpt>(o);
    m->to(torch::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    const at::Tensor loss = m->language_model_loss(tokens, targets, /*fused=*/true);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
    loss.backward();
    return std::make_pair(loss.item<double>(), m);
  };
  const auto [want, one] = run(0);
  for (int64_t chunk_rows : {100, 256}) {  // 256 rows: three chunks (100, 100, 56), then one
    SCOPED_TRACE("head_chunk_rows " + std::to_string(chunk_rows));
    const auto [got, chunked] = run(chunk_rows);
    EXPECT_NEAR(got, want, 1e-3 * want);
    EXPECT_NE(chunked->describe().find(chunk_rows == 100 ? "in chunks of 100 rows" : "head+loss"),
              std::string::npos)
        << chunked->describe();
    const auto b = one->named_parameters();
    for (const auto& p : chunked->named_parameters()) {
      const at::Tensor g = p.value().grad().cpu(), ref = b[p.key()].grad().cpu();
      const double rel = (g - ref).norm().item<double>() / (ref.norm().item<double>() + 1e-12);
      EXPECT_LT(rel, 1e-2) << "grad of " << p.key();
    }
  }
}

// train.deterministic on the GPU: a GPT training step, fused (bf16 autocast, the head+loss op, the
// fused kernels, the attention backend that auto resolves to, embedding backward) and unfused
// (ATen's cross_entropy, layer_norm, gelu), gives the same gradients bit for bit every time. T =
// 512 with 64 per head: every attention backward has several key blocks to add across (where the
// default flash, cuDNN and memory-efficient kernels accumulate in arrival order: bench/RESULTS.md
// section 6, update 14).
TEST(GptTest, CudaDeterministicTrainingStepIsReproducibleBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const DeterministicScope deterministic;
  auto o = gpt_options(2, 4, 256, 512, 1000);
  const at::Tensor tokens = torch::randint(0, 1000, {8, 512}, at::kLong).to(torch::kCUDA);
  const at::Tensor targets = torch::randint(0, 1000, {8, 512}, at::kLong).to(torch::kCUDA);
  // The fused ops, and the unfused ATen composition (cross_entropy, layer_norm, gelu, ...).
  for (const bool fused : {true, false}) {
    for (const char* backend : {"auto", "flash", "efficient", "math"}) {
      SCOPED_TRACE(std::string(fused ? "fused" : "unfused") + ", model.attention " + backend);
      o.fused = fused ? "auto" : "false";
      o.attention = backend;
      torch::manual_seed(8);
      Gpt m(o);
      m.to(torch::kCUDA);
      test::expect_reproducible_gradients(m, [&] {
        const AutocastGuard bf16(Precision::kBF16, torch::kCUDA);
        return m.language_model_loss(tokens, targets, fused);
      });
    }
  }
}

TEST(GptTest, CudaDeterministicAttentionResolvesToFlashAndRefusesCudnn) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  EXPECT_EQ(resolve_attention_backend(AttentionBackend::kCudnn, cuda, at::kBFloat16),
            AttentionBackend::kCudnn);
  const DeterministicScope deterministic;
  EXPECT_EQ(resolve_attention_backend(AttentionBackend::kAuto, cuda, at::kBFloat16),
            AttentionBackend::kFlash);
  EXPECT_EQ(resolve_attention_backend(AttentionBackend::kAuto, cuda, at::kFloat),
            AttentionBackend::kAuto);  // fp32: ATen's own (deterministic) choice
  EXPECT_EQ(resolve_attention_backend(AttentionBackend::kEfficient, cuda, at::kBFloat16),
            AttentionBackend::kEfficient);
  try {
    resolve_attention_backend(AttentionBackend::kCudnn, cuda, at::kBFloat16);
    FAIL() << "cudnn attention accepted under train.deterministic";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.attention: cudnn"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.deterministic"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brrr
