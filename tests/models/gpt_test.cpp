#include "models/gpt.h"

#include <gtest/gtest.h>

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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
  // was 52 extra kernels per GPT-2 step on the GPU.
  Gpt model(gpt_options(1, 2, 16, 8, 32));
  const at::Tensor tokens = at::randint(32, {2, 8}, at::kLong);
  const auto names = ops_run_by([&] { model.forward(tokens); });
  auto count = [&](const std::string& op) { return std::count(names.begin(), names.end(), op); };
  EXPECT_EQ(count("aten::matmul"), 1) << "only the untied-bias-free head may use matmul";
  EXPECT_EQ(count("aten::add_"), 0);
  EXPECT_EQ(count("aten::addmm"), 4) << "c_attn, attn.c_proj, c_fc, mlp.c_proj";
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

}  // namespace
}  // namespace brrr
