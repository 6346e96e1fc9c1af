// fused_classifier and lm_head_loss: the references against F.cross_entropy (ATen's
// cross_entropy_loss), the autograd Functions' CPU stages against the references and against
// finite differences, ignore_index, the in-place gradient's contract, errors; on CUDA the kernels
// against the references on fresh random inputs, odd sizes, misaligned rows, every dtype.
#include "core/ops/fused_classifier.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "tests/core/ops/ops_test_util.h"

namespace brrr {
namespace {

using test::rel_error;

// Random targets with about a quarter of the rows set to ignore_index (row 0 always counts).
at::Tensor make_targets(int64_t rows, int64_t vocab, const at::TensorOptions& options) {
  at::Tensor t = at::randint(0, vocab, {rows}, options.dtype(at::kLong));
  at::Tensor drop = at::rand({rows}, options.dtype(at::kFloat)).lt(0.25);
  drop.index_put_({0}, false);
  return t.masked_fill(drop, kIgnoreIndex);
}

// {loss, d loss / d logits} of `op` applied to a copy of logits (the Function overwrites its
// input with the gradient); grad_scale multiplies the loss before backward.
template <typename Op>
std::pair<at::Tensor, at::Tensor> loss_and_grad(Op op, const at::Tensor& logits,
                                                const at::Tensor& targets,
                                                double grad_scale = 1.0) {
  at::Tensor leaf = logits.detach().clone().requires_grad_(true);
  at::Tensor loss = op(leaf.clone(), targets);  // a non-leaf buffer, as the lm_head's output
  (loss * grad_scale).backward();
  return {loss.detach(), leaf.grad()};
}

const auto kReference = [](const at::Tensor& l, const at::Tensor& t) {
  return fused_classifier_reference(l, t);
};
const auto kFunction = [](const at::Tensor& l, const at::Tensor& t) {
  return detail::fused_classifier_function(l, t);
};

TEST(FusedClassifierTest, ReferenceEqualsCrossEntropy) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor logits = at::randn({37, 101}) * 3;
  const at::Tensor targets = make_targets(37, 101, at::TensorOptions());
  const auto unfused = [](const at::Tensor& l, const at::Tensor& t) {
    return at::cross_entropy_loss(l, t, {}, at::Reduction::Mean, kIgnoreIndex);
  };
  const auto [loss, grad] = loss_and_grad(kReference, logits, targets);
  const auto [want_loss, want_grad] = loss_and_grad(unfused, logits, targets);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_LT(rel_error(loss, want_loss), 1e-6);
  EXPECT_LT(rel_error(grad, want_grad), 1e-6);
}

TEST(FusedClassifierTest, FunctionMatchesTheReference) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor logits = (at::randn({29, 257}) * 4).to(dtype);
    const at::Tensor targets = make_targets(29, 257, at::TensorOptions());
    const auto [loss, grad] = loss_and_grad(kFunction, logits, targets, 0.7);
    const auto [want_loss, want_grad] = loss_and_grad(kReference, logits, targets, 0.7);
    const double tol = dtype == at::kFloat ? 1e-6 : 1e-2;
    EXPECT_EQ(loss.scalar_type(), at::kFloat) << dtype;
    EXPECT_EQ(grad.scalar_type(), dtype);
    EXPECT_LT(rel_error(loss, want_loss), tol) << dtype;
    EXPECT_LT(rel_error(grad, want_grad), tol) << dtype;
  }
}

TEST(FusedClassifierTest, GradientMatchesFiniteDifferences) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor logits = at::randn({6, 7}, at::kDouble);
  at::Tensor targets = at::randint(0, 7, {6}, at::kLong);
  targets.index_put_({2}, kIgnoreIndex);
  for (const auto& [name, op] : {std::pair{"function", std::function(kFunction)},
                                 std::pair{"reference", std::function(kReference)}}) {
    const auto [loss, grad] = loss_and_grad(op, logits, targets);
    EXPECT_EQ(loss.scalar_type(), at::kDouble) << name;
    const at::Tensor probe = logits.clone();
    const at::Tensor numeric =
        test::numeric_grad([&] { return op(probe.clone(), targets); }, probe);
    EXPECT_LT(rel_error(grad, numeric), 1e-7) << name;
  }
}

TEST(FusedClassifierTest, IgnoredRowsDoNotCountAndGetZeroGradient) {
  const at::Tensor logits = at::randn({4, 9});
  const at::Tensor targets =
      at::tensor(std::vector<int64_t>{3, kIgnoreIndex, 8, kIgnoreIndex}, at::kLong);
  const auto [loss, grad] = loss_and_grad(kFunction, logits, targets);
  const at::Tensor lse = logits.logsumexp(1);
  const double want = ((lse[0] - logits[0][3] + lse[2] - logits[2][8]) / 2).item<double>();
  EXPECT_NEAR(loss.item<double>(), want, 1e-6);
  EXPECT_TRUE(grad[1].eq(0).all().item<bool>());
  EXPECT_TRUE(grad[3].eq(0).all().item<bool>());
  EXPECT_TRUE(grad[0].ne(0).all().item<bool>());
  // Nothing counts: 0 / 0 as in PyTorch, and no gradient anywhere.
  const at::Tensor none = at::full({4}, kIgnoreIndex, at::kLong);
  const auto [nan_loss, zero_grad] = loss_and_grad(kFunction, logits, none);
  EXPECT_TRUE(std::isnan(nan_loss.item<double>()));
  EXPECT_TRUE(std::isnan(fused_classifier_reference(logits, none).item<double>()));
  EXPECT_TRUE(zero_grad.eq(0).all().item<bool>());
}

TEST(FusedClassifierTest, BackwardWritesTheGradientIntoTheLogits) {
  at::Tensor leaf = at::randn({5, 11}).requires_grad_(true);
  at::Tensor logits = leaf * 2;  // the buffer the op consumes
  const at::Tensor targets = at::randint(0, 11, {5}, at::kLong);
  const int64_t version = logits._version();
  at::Tensor loss = detail::fused_classifier_function(logits, targets);
  loss.backward();
  EXPECT_GT(logits._version(), version);  // a later reader of the logits fails loudly
  EXPECT_LT(rel_error(leaf.grad(), logits.detach() * 2), 1e-7);  // d/dleaf = 2 d/dlogits
}

TEST(FusedClassifierTest, SecondBackwardThroughTheGraphThrows) {
  at::Tensor leaf = at::randn({3, 5}).requires_grad_(true);
  at::Tensor loss = detail::fused_classifier_function(leaf * 1, at::tensor({0, 1, 2}, at::kLong));
  loss.backward({}, /*retain_graph=*/true);
  try {
    loss.backward();
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("backward ran twice"), std::string::npos) << e.what();
  }
}

TEST(FusedClassifierTest, AccumulatesThroughSharedWeightsAndMicroBatches) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor h1 = at::randn({6, 8}), h2 = at::randn({4, 8});
  const at::Tensor t1 = make_targets(6, 13, {}), t2 = make_targets(4, 13, {});
  const at::Tensor w0 = at::randn({8, 13});
  auto grad_of_weight = [&](auto op) {
    const at::Tensor w = w0.clone().requires_grad_(true);
    (op(at::matmul(h1, w), t1) + 0.5 * op(at::matmul(h2, w), t2)).backward();
    op(at::matmul(h2, w), t2).backward();  // a second micro-batch adds into w.grad
    return w.grad().clone();
  };
  EXPECT_LT(rel_error(grad_of_weight(kFunction), grad_of_weight(kReference)), 1e-6);
}

TEST(FusedClassifierTest, RunsInTheLogitsDtypeUnderAutocast) {
  const at::Tensor h = at::randn({6, 16}), w = at::randn({16, 10}).requires_grad_(true);
  const at::Tensor targets = at::randint(0, 10, {6}, at::kLong);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const at::Tensor logits = at::matmul(h, w);  // bf16 under autocast
  const at::Tensor loss = detail::fused_classifier_function(logits, targets);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_LT(rel_error(loss, fused_classifier_reference(at::matmul(h, w), targets)), 1e-2);
}

TEST(FusedClassifierTest, OutOfRangeTargetMakesTheLossNaN) {
  const at::Tensor logits = at::randn({3, 4});
  const at::Tensor targets = at::tensor({1, 4, 2}, at::kLong);  // 4 is outside [0, 4)
  const auto [loss, grad] = loss_and_grad(kFunction, logits, targets);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  EXPECT_TRUE(grad[1].isnan().all().item<bool>());
  EXPECT_TRUE(grad[0].isfinite().all().item<bool>());
  EXPECT_ANY_THROW(fused_classifier_reference(logits, targets));  // nll_loss checks on the CPU
}

TEST(FusedClassifierTest, BadArgumentsNameWhatIsWrong) {
  const at::Tensor logits = at::randn({4, 6});
  const at::Tensor targets = at::zeros({4}, at::kLong);
  auto message = [](auto&& f) { return test::data_error_message(f); };
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(message([&] {
                    fused_classifier(logits.view({4, 2, 3}), targets);
                  }),
                  "logits must be (N, V) with V > 0, got Float [4, 2, 3]"));
  EXPECT_TRUE(has(message([&] {
                    fused_classifier(at::zeros({4, 0}), targets);
                  }),
                  "got Float [4, 0]"));
  EXPECT_TRUE(has(message([&] { fused_classifier(logits.to(at::kInt), targets); }),
                  "logits must be float32, float64, bfloat16 or float16, got Int [4, 6]"));
  EXPECT_TRUE(has(message([&] {
                    fused_classifier(at::randn({6, 4}).t(), targets);
                  }),
                  "logits must be contiguous, got sizes [4, 6] strides [1, 4]"));
  EXPECT_TRUE(has(message([&] { fused_classifier(logits, targets.to(at::kInt)); }),
                  "targets must be int64 (4,) on cpu for logits [4, 6], got Int [4] on cpu"));
  EXPECT_TRUE(has(message([&] { fused_classifier(logits, at::zeros({5}, at::kLong)); }),
                  "got Long [5] on cpu"));
  EXPECT_TRUE(has(message([&] {
                    detail::fused_classifier_function(logits, targets.view({2, 2}));
                  }),
                  "got Long [2, 2] on cpu"));
}

// ---- lm_head_loss: the head and the loss as one op -----------------------------------------

struct HeadResult {
  at::Tensor loss, d_hidden, d_weight;
};

// loss and the gradients of hidden and weight through `op`, the loss multiplied by grad_scale
// before backward.
template <typename Op>
HeadResult head_loss_and_grads(Op op, const at::Tensor& hidden, const at::Tensor& weight,
                               const at::Tensor& targets, double grad_scale = 1.0) {
  const at::Tensor h = hidden.detach().clone().requires_grad_(true);
  const at::Tensor w = weight.detach().clone().requires_grad_(true);
  const at::Tensor loss = op(h, w, targets);
  (loss * grad_scale).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

const auto kHeadReference = [](const at::Tensor& h, const at::Tensor& w, const at::Tensor& t) {
  return lm_head_loss_reference(h, w, t);
};
const auto kHeadFunction = [](const at::Tensor& h, const at::Tensor& w, const at::Tensor& t) {
  return detail::lm_head_loss_function(h, w, t);
};

TEST(LmHeadLossTest, FunctionMatchesTheReference) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    const at::Tensor hidden = at::randn({23, 16}).to(dtype);
    const at::Tensor weight = (at::randn({131, 16}) * 0.5).to(dtype);
    const at::Tensor targets = make_targets(23, 131, at::TensorOptions());
    const HeadResult got = head_loss_and_grads(kHeadFunction, hidden, weight, targets, 1.7);
    const HeadResult want = head_loss_and_grads(kHeadReference, hidden, weight, targets, 1.7);
    EXPECT_EQ(got.loss.scalar_type(), dtype == at::kDouble ? at::kDouble : at::kFloat);
    EXPECT_EQ(got.d_hidden.scalar_type(), dtype);
    EXPECT_EQ(got.d_weight.scalar_type(), dtype);
    EXPECT_LT(rel_error(got.loss, want.loss), 1e-6) << dtype;
    EXPECT_LT(rel_error(got.d_hidden, want.d_hidden), 1e-6) << dtype;
    EXPECT_LT(rel_error(got.d_weight, want.d_weight), 1e-6) << dtype;
  }
}

TEST(LmHeadLossTest, GradientsMatchFiniteDifferences) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor hidden = at::randn({5, 4}, at::kDouble);
  const at::Tensor weight = at::randn({9, 4}, at::kDouble);
  at::Tensor targets = at::randint(0, 9, {5}, at::kLong);
  targets.index_put_({3}, kIgnoreIndex);
  const HeadResult got = head_loss_and_grads(kHeadFunction, hidden, weight, targets);
  const at::Tensor h = hidden.clone(), w = weight.clone();
  const auto loss = [&] { return detail::lm_head_loss_function(h, w, targets); };
  EXPECT_LT(rel_error(got.d_hidden, test::numeric_grad(loss, h)), 1e-7);
  EXPECT_LT(rel_error(got.d_weight, test::numeric_grad(loss, w)), 1e-7);
}

TEST(LmHeadLossTest, WithoutGradientsTheLossIsTheSame) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor hidden = at::randn({12, 8}), weight = at::randn({40, 8});
  const at::Tensor targets = make_targets(12, 40, at::TensorOptions());
  const HeadResult with = head_loss_and_grads(kHeadFunction, hidden, weight, targets);
  at::Tensor without;
  {
    const at::NoGradGuard no_grad;
    without = detail::lm_head_loss_function(hidden.requires_grad_(false), weight, targets);
  }
  EXPECT_FALSE(without.requires_grad());
  EXPECT_TRUE(at::equal(with.loss, without));
  // Inputs that need no gradient under grad mode take the same forward-only path.
  EXPECT_TRUE(at::equal(detail::lm_head_loss_function(hidden, weight, targets), without));
}

TEST(LmHeadLossTest, SecondBackwardAndMicroBatchesAccumulate) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor h1 = at::randn({7, 6}), h2 = at::randn({5, 6}), w0 = at::randn({19, 6});
  const at::Tensor t1 = make_targets(7, 19, {}), t2 = make_targets(5, 19, {});
  auto grad_of_weight = [&](auto op) {
    const at::Tensor w = w0.clone().requires_grad_(true);
    const at::Tensor first = op(h1, w, t1);
    first.backward({}, /*retain_graph=*/true);
    (0.5 * first).backward();  // the saved gradient buffer is read, not consumed
    op(h2, w, t2).backward();  // a second micro-batch adds into w.grad
    return w.grad().clone();
  };
  EXPECT_LT(rel_error(grad_of_weight(kHeadFunction), grad_of_weight(kHeadReference)), 1e-6);
}

TEST(LmHeadLossTest, ScratchHiddenTakesItsGradient) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor leaf = at::randn({9, 5}).requires_grad_(true);
  const at::Tensor w0 = at::randn({21, 5});
  const at::Tensor targets = make_targets(9, 21, at::TensorOptions());
  const HeadResult want = head_loss_and_grads(kHeadFunction, leaf, w0, targets);
  const at::Tensor hidden = leaf * 1;  // the buffer the op may overwrite
  const at::Tensor w = w0.clone().requires_grad_(true);
  const int64_t version = hidden._version();
  const at::Tensor loss =
      detail::lm_head_loss_function(hidden, w, targets, kIgnoreIndex, /*hidden_is_scratch=*/true);
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_TRUE(at::equal(loss.detach(), want.loss));
  EXPECT_LT(rel_error(leaf.grad(), want.d_hidden), 1e-6);
  EXPECT_LT(rel_error(w.grad(), want.d_weight), 1e-6);
  EXPECT_TRUE(at::equal(hidden.detach(), leaf.grad()));  // hidden's buffer holds d hidden
  EXPECT_GT(hidden._version(), version);
  try {
    loss.backward();
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("backward ran twice"), std::string::npos) << e.what();
  }
}

// ---- lm_head_loss in chunks of rows: the same loss and gradients without the (N, V) logits ----

auto head_in_chunks(int64_t chunk_rows, bool scratch = false) {
  return [chunk_rows, scratch](const at::Tensor& h, const at::Tensor& w, const at::Tensor& t) {
    return detail::lm_head_loss_function(h, w, t, kIgnoreIndex, scratch, chunk_rows);
  };
}

TEST(LmHeadLossChunkedTest, EveryChunkSizeMatchesOneChunk) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  // 23 rows: chunks of 1, 5 (a short last chunk), 22, and sizes >= N that take the one-chunk path.
  const at::Tensor hidden = at::randn({23, 16}, at::kDouble);
  const at::Tensor weight = at::randn({131, 16}, at::kDouble) * 0.5;
  at::Tensor targets = make_targets(23, 131, at::TensorOptions());
  targets.index_put_({4}, kIgnoreIndex);
  const HeadResult want = head_loss_and_grads(kHeadFunction, hidden, weight, targets, 1.7);
  for (int64_t chunk : {1, 5, 22, 23, 64}) {
    SCOPED_TRACE("chunk_rows " + std::to_string(chunk));
    const HeadResult got = head_loss_and_grads(head_in_chunks(chunk), hidden, weight, targets, 1.7);
    EXPECT_LT(rel_error(got.loss, want.loss), 1e-12);
    EXPECT_LT(rel_error(got.d_hidden, want.d_hidden), 1e-12);
    EXPECT_LT(rel_error(got.d_weight, want.d_weight), 1e-12);
    EXPECT_TRUE(got.d_hidden[4].eq(0).all().item<bool>());  // the ignored row
  }
}

TEST(LmHeadLossChunkedTest, GradientsMatchFiniteDifferencesAndTheReference) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor hidden = at::randn({7, 4}, at::kDouble);
  const at::Tensor weight = at::randn({9, 4}, at::kDouble);
  at::Tensor targets = at::randint(0, 9, {7}, at::kLong);
  targets.index_put_({2}, kIgnoreIndex);
  const HeadResult got = head_loss_and_grads(head_in_chunks(3), hidden, weight, targets);
  const at::Tensor h = hidden.clone(), w = weight.clone();
  const auto loss = [&] { return head_in_chunks(3)(h, w, targets); };
  EXPECT_LT(rel_error(got.d_hidden, test::numeric_grad(loss, h)), 1e-7);
  EXPECT_LT(rel_error(got.d_weight, test::numeric_grad(loss, w)), 1e-7);
  // float32: against the ATen reference, as the one-chunk Function is.
  const at::Tensor h32 = hidden.to(at::kFloat), w32 = weight.to(at::kFloat);
  const HeadResult got32 = head_loss_and_grads(head_in_chunks(2), h32, w32, targets, 0.3);
  const HeadResult want32 = head_loss_and_grads(kHeadReference, h32, w32, targets, 0.3);
  EXPECT_EQ(got32.d_weight.scalar_type(), at::kFloat);
  EXPECT_LT(rel_error(got32.loss, want32.loss), 1e-6);
  EXPECT_LT(rel_error(got32.d_hidden, want32.d_hidden), 1e-6);
  EXPECT_LT(rel_error(got32.d_weight, want32.d_weight), 1e-6);
}

TEST(LmHeadLossChunkedTest, HalfPrecisionSumsTheWeightGradientInFloat) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  // bf16 inputs: d W is summed over the chunks in float and rounded once, so it equals the
  // float64 answer to the rounded inputs within bf16's rounding (2^-8), chunk count aside.
  const at::Tensor hidden = at::randn({40, 8}).to(at::kBFloat16);
  const at::Tensor weight = (at::randn({33, 8}) * 0.5).to(at::kBFloat16);
  const at::Tensor targets = make_targets(40, 33, at::TensorOptions());
  const HeadResult got = head_loss_and_grads(head_in_chunks(3), hidden, weight, targets);
  const HeadResult want =
      head_loss_and_grads(kHeadFunction, hidden.to(at::kDouble), weight.to(at::kDouble), targets);
  EXPECT_EQ(got.d_weight.scalar_type(), at::kBFloat16);
  EXPECT_EQ(got.d_hidden.scalar_type(), at::kBFloat16);
  EXPECT_LT(rel_error(got.d_weight, want.d_weight), 1e-2);
  EXPECT_LT(rel_error(got.d_hidden, want.d_hidden), 1e-2);
  EXPECT_LT(rel_error(got.loss, want.loss), 1e-2);
}

TEST(LmHeadLossChunkedTest, WithoutGradientsSecondBackwardAndMicroBatches) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor h1 = at::randn({7, 6}), h2 = at::randn({5, 6}), w0 = at::randn({19, 6});
  const at::Tensor t1 = make_targets(7, 19, {}), t2 = make_targets(5, 19, {});
  {
    const at::NoGradGuard no_grad;
    EXPECT_LT(rel_error(head_in_chunks(2)(h1, w0, t1), kHeadFunction(h1, w0, t1)), 1e-6);
  }
  auto grad_of_weight = [&](auto op) {
    const at::Tensor w = w0.clone().requires_grad_(true);
    const at::Tensor first = op(h1, w, t1);
    first.backward({}, /*retain_graph=*/true);
    (0.5 * first).backward();  // the saved, unscaled gradients are read, not consumed
    op(h2, w, t2).backward();  // a second micro-batch adds into w.grad
    return w.grad().clone();
  };
  EXPECT_LT(rel_error(grad_of_weight(head_in_chunks(3)), grad_of_weight(kHeadReference)), 1e-6);
}

TEST(LmHeadLossChunkedTest, ScratchHiddenHoldsItsGradientAfterTheForward) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor leaf = at::randn({9, 5}).requires_grad_(true);
  const at::Tensor w0 = at::randn({21, 5});
  const at::Tensor targets = make_targets(9, 21, at::TensorOptions());
  const HeadResult want = head_loss_and_grads(kHeadFunction, leaf, w0, targets);
  const at::Tensor hidden = leaf * 1;  // the buffer the op may overwrite
  const at::Tensor w = w0.clone().requires_grad_(true);
  const int64_t version = hidden._version();
  const at::Tensor loss = head_in_chunks(4, /*scratch=*/true)(hidden, w, targets);
  EXPECT_GT(hidden._version(), version);  // already in the forward: the chunks' d hidden
  EXPECT_LT(rel_error(loss.detach(), want.loss), 1e-6);
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_LT(rel_error(leaf.grad(), want.d_hidden), 1e-6);
  EXPECT_LT(rel_error(w.grad(), want.d_weight), 1e-6);
  EXPECT_TRUE(at::equal(hidden.detach(), leaf.grad()));  // scaled in place by the backward
  try {
    loss.backward();
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("backward ran twice"), std::string::npos) << e.what();
  }
}

TEST(LmHeadLossChunkedTest, OnlyTheGradientsAskedForAreTaken) {
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor h0 = at::randn({11, 6}, at::kDouble), w0 = at::randn({17, 6}, at::kDouble);
  const at::Tensor targets = make_targets(11, 17, at::TensorOptions());
  const HeadResult want = head_loss_and_grads(kHeadFunction, h0, w0, targets, 0.7);
  {  // a frozen head: d hidden only
    const at::Tensor h = h0.clone().requires_grad_(true), w = w0.clone();
    (0.7 * head_in_chunks(4)(h, w, targets)).backward();
    EXPECT_LT(rel_error(h.grad(), want.d_hidden), 1e-12);
    EXPECT_FALSE(w.grad().defined());
  }
  {  // hidden states without a gradient, given as scratch: d W only, hidden's buffer untouched
    const at::Tensor h = h0.clone(), w = w0.clone().requires_grad_(true);
    const int64_t version = h._version();
    const at::Tensor loss = head_in_chunks(4, /*scratch=*/true)(h, w, targets);
    (0.7 * loss).backward();
    EXPECT_LT(rel_error(w.grad(), want.d_weight), 1e-12);
    EXPECT_EQ(h._version(), version);
    EXPECT_TRUE(at::equal(h, h0));
    EXPECT_LT(rel_error(loss.detach(), want.loss), 1e-12);
  }
}

TEST(LmHeadLossChunkedTest, NegativeChunkRowsIsAnError) {
  const at::Tensor hidden = at::randn({4, 3}), weight = at::randn({6, 3});
  const at::Tensor targets = at::zeros({4}, at::kLong);
  const std::string want = "lm_head_loss: chunk_rows must be >= 0 (0: all rows at once), got -2";
  EXPECT_EQ(test::data_error_message(
                [&] { lm_head_loss(hidden, weight, targets, kIgnoreIndex, false, -2); }),
            want);
  EXPECT_EQ(test::data_error_message([&] { head_in_chunks(-2)(hidden, weight, targets); }), want);
}

TEST(LmHeadLossTest, IgnoredAndOutOfRangeRows) {
  const at::Tensor hidden = at::randn({4, 3}), weight = at::randn({6, 3});
  const at::Tensor ignored =
      at::tensor(std::vector<int64_t>{2, kIgnoreIndex, 5, kIgnoreIndex}, at::kLong);
  const HeadResult got = head_loss_and_grads(kHeadFunction, hidden, weight, ignored);
  const HeadResult want = head_loss_and_grads(kHeadReference, hidden, weight, ignored);
  EXPECT_LT(rel_error(got.loss, want.loss), 1e-6);
  EXPECT_TRUE(got.d_hidden[1].eq(0).all().item<bool>());
  EXPECT_LT(rel_error(got.d_weight, want.d_weight), 1e-6);
  const at::Tensor out_of_range = at::tensor(std::vector<int64_t>{2, 6, 5, 0}, at::kLong);
  const HeadResult bad = head_loss_and_grads(kHeadFunction, hidden, weight, out_of_range);
  EXPECT_TRUE(std::isnan(bad.loss.item<double>()));
  EXPECT_TRUE(bad.d_hidden[1].isnan().all().item<bool>());
  EXPECT_TRUE(bad.d_hidden[0].isfinite().all().item<bool>());
}

TEST(LmHeadLossTest, BadArgumentsNameWhatIsWrong) {
  const at::Tensor hidden = at::randn({4, 3}), weight = at::randn({6, 3});
  const at::Tensor targets = at::zeros({4}, at::kLong);
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos;
  };
  const std::string shapes = test::data_error_message([&] {
    lm_head_loss(hidden, at::randn({6, 5}), targets);
  });
  EXPECT_TRUE(has(shapes, "lm_head_loss: expected hidden (N, C) and weight (V, C)")) << shapes;
  EXPECT_TRUE(has(shapes, "got hidden Float [4, 3] on cpu, weight Float [6, 5] on cpu")) << shapes;
  EXPECT_TRUE(
      has(test::data_error_message([&] { lm_head_loss(hidden, weight.to(at::kDouble), targets); }),
          "weight Double [6, 3]"));
  EXPECT_TRUE(has(test::data_error_message(
                      [&] { lm_head_loss(hidden.to(at::kInt), weight.to(at::kInt), targets); }),
                  "got hidden Int [4, 3]"));
  EXPECT_TRUE(has(test::data_error_message([&] {
                    detail::lm_head_loss_function(hidden, weight, at::zeros({3}, at::kLong));
                  }),
                  "lm_head_loss: targets must be int64 (4,) on cpu for hidden [4, 3], got Long "
                  "[3] on cpu"));
}

// ---- CUDA: the kernels against the reference on the GPU ----------------------------------

// (N, V) shapes: tiny, V = 50257 unpadded (odd, rows not 16-byte aligned), V = 50304 padded,
// N not a multiple of anything, and a larger N.
const std::vector<std::pair<int64_t, int64_t>> kCudaShapes = {
    {1, 5}, {3, 1000}, {7, 50257}, {33, 50304}, {129, 50257}, {2048, 50304}};

// logits of `shape` on the GPU; misaligned: a view one element into a larger buffer, so that no
// row starts on a 16-byte boundary (the head/tail path).
at::Tensor cuda_logits(int64_t rows, int64_t vocab, at::ScalarType dtype, bool misaligned) {
  const auto options = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  at::Tensor buffer = (at::randn({rows * vocab + 1}, options) * 3).to(dtype);
  return buffer.narrow(0, misaligned ? 1 : 0, rows * vocab).view({rows, vocab});
}

TEST(FusedClassifierCudaTest, KernelsMatchTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::fused_classifier_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& [rows, vocab] : kCudaShapes) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (bool misaligned : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "N " << rows << " V " << vocab << " " << dtype
                                          << (misaligned ? " misaligned" : ""));
        const at::Tensor logits = cuda_logits(rows, vocab, dtype, misaligned);
        const at::Tensor targets = make_targets(rows, vocab, cuda);
        test::poison({{{rows}, at::kFloat}, {{rows}, at::kFloat}}, cuda.device());
        const auto [loss, grad] = loss_and_grad(kFunction, logits, targets, 1.3);
        const auto [want_loss, want_grad] = loss_and_grad(kReference, logits, targets, 1.3);
        const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
        ASSERT_EQ(loss.scalar_type(), at::kFloat);
        EXPECT_LT(rel_error(loss, want_loss), tol);
        EXPECT_LT(rel_error(grad, want_grad), tol);
      }
    }
  }
}

TEST(FusedClassifierCudaTest, DispatchesToTheKernelAndIsDeterministic) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::fused_classifier_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const at::Tensor logits = cuda_logits(515, 50257, at::kBFloat16, false);
  const at::Tensor targets = make_targets(515, 50257, at::TensorOptions().device(at::kCUDA));
  const auto op = [](const at::Tensor& l, const at::Tensor& t) { return fused_classifier(l, t); };
  const auto [loss1, grad1] = loss_and_grad(op, logits, targets);
  const auto [loss2, grad2] = loss_and_grad(op, logits, targets);
  EXPECT_TRUE(at::equal(loss1, loss2));
  EXPECT_TRUE(at::equal(grad1, grad2));
  // The public op took the Function: its input buffer now holds the gradient.
  at::Tensor leaf = logits.clone().requires_grad_(true);
  at::Tensor consumed = leaf * 1;
  fused_classifier(consumed, targets).backward();
  EXPECT_TRUE(at::equal(consumed.detach(), leaf.grad()));
}

TEST(FusedClassifierCudaTest, IgnoredAndOutOfRangeRows) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::fused_classifier_cuda_built());
  const at::Tensor logits = cuda_logits(4, 50257, at::kFloat, true);
  const at::Tensor targets =
      at::tensor(std::vector<int64_t>{5, kIgnoreIndex, 50256, 50257}, at::kLong).cuda();
  const auto [loss, grad] = loss_and_grad(kFunction, logits, targets);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  EXPECT_TRUE(grad[1].eq(0).all().item<bool>());
  EXPECT_TRUE(grad[3].isnan().all().item<bool>());
  const at::Tensor valid = targets.narrow(0, 0, 3);
  const auto [loss3, grad3] = loss_and_grad(kFunction, logits.narrow(0, 0, 3), valid);
  const auto [want3, want_grad3] = loss_and_grad(kReference, logits.narrow(0, 0, 3), valid);
  EXPECT_LT(rel_error(loss3, want3), 1e-5);
  EXPECT_LT(rel_error(grad3, want_grad3), 1e-5);
}

TEST(LmHeadLossCudaTest, ChunkedGradientsOfAFrozenInputAreSkippedAndTheOthersUnchanged) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor h0 = at::randn({37, 96}, cuda).to(at::kBFloat16);
  const at::Tensor w0 = (at::randn({50257, 96}, cuda) * 0.2).to(at::kBFloat16);
  const at::Tensor targets = make_targets(37, 50257, cuda);
  const HeadResult both = head_loss_and_grads(head_in_chunks(16), h0, w0, targets, 1.3);
  {  // a frozen head: the same d hidden, bit for bit (the same GEMMs run)
    const at::Tensor h = h0.clone().requires_grad_(true);
    (1.3 * head_in_chunks(16)(h, w0, targets)).backward();
    EXPECT_TRUE(at::equal(h.grad(), both.d_hidden));
  }
  {  // hidden without a gradient, as scratch: the same d W, hidden left as it was
    const at::Tensor h = h0.clone(), w = w0.clone().requires_grad_(true);
    (1.3 * head_in_chunks(16, /*scratch=*/true)(h, w, targets)).backward();
    EXPECT_TRUE(at::equal(w.grad(), both.d_weight));
    EXPECT_TRUE(at::equal(h, h0));
  }
}

TEST(LmHeadLossCudaTest, MatchesTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(detail::fused_classifier_cuda_built());
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  // (N, C, V): V = 50257 leaves every row but the first off a 16-byte boundary.
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 8, 5}, {3, 64, 1000}, {37, 96, 50257}, {130, 768, 50304}};
  // chunk_rows 16: 37 rows are chunks of 16, 16 and 5 (d W summed by cuBLAS into float).
  for (const auto& [rows, channels, vocab] : shapes) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (int64_t chunk : {0, 16}) {
        SCOPED_TRACE(::testing::Message() << "N " << rows << " C " << channels << " V " << vocab
                                          << " " << dtype << " chunk_rows " << chunk);
        const at::Tensor hidden = at::randn({rows, channels}, cuda).to(dtype);
        const at::Tensor weight =
            (at::randn({vocab, channels}, cuda) * (2.0 / std::sqrt(channels))).to(dtype);
        const at::Tensor targets = make_targets(rows, vocab, cuda);
        test::poison({{{rows, vocab}, dtype},
                      {{rows}, at::kFloat},
                      {{rows, channels}, dtype},
                      {{vocab, channels}, dtype}},
                     cuda.device());
        const HeadResult got =
            head_loss_and_grads(head_in_chunks(chunk), hidden, weight, targets, 1.3);
        // The reference in float64 from the same rounded inputs: the exact answer to them.
        const at::Tensor h64 = hidden.to(at::kDouble), w64 = weight.to(at::kDouble);
        const HeadResult want = head_loss_and_grads(kHeadReference, h64, w64, targets, 1.3);
        const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
        // The kernel computes p = softmax to float precision, then p - onehot: where a row's target
        // takes nearly all the mass (p_t -> 1), that difference cancels and its relative error
        // grows by ||p|| / ||p - onehot|| over the counted rows (a tiny V makes this likely: 1.5e-5
        // was seen at N 1, V 5). The gradients' bound carries that factor; the loss's does not.
        const at::Tensor counted = targets.ne(kIgnoreIndex);
        const at::Tensor p = at::softmax(at::mm(h64, w64.t()), 1).index({counted});
        const at::Tensor onehot =
            at::one_hot(targets.index({counted}), vocab).to(at::kDouble).to(p.device());
        const double cancel =
            std::max(1.0, p.norm().item<double>() / (p - onehot).norm().item<double>());
        // The loss is computed from logits in the inputs' dtype (the GEMM's output): the reference
        // rounds them there too (with N = 1 and V = 5, bf16 logits alone move the loss by ~1%).
        const at::Tensor want_loss = lm_head_loss_reference(hidden, weight, targets, kIgnoreIndex);
        ASSERT_EQ(got.loss.scalar_type(), at::kFloat);
        EXPECT_LT(rel_error(got.loss, want_loss), tol);
        EXPECT_LT(rel_error(got.loss, want.loss), dtype == at::kFloat ? tol : 5e-2);
        EXPECT_LT(rel_error(got.d_hidden, want.d_hidden), tol * cancel)
            << "cancellation " << cancel;
        EXPECT_LT(rel_error(got.d_weight, want.d_weight), tol * cancel)
            << "cancellation " << cancel;
      }
    }
  }
}

TEST(LmHeadLossCudaTest, ForwardGradKernelOnMisalignedRows) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    for (bool misaligned : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype << (misaligned ? " misaligned" : ""));
      const at::Tensor logits = cuda_logits(67, 50257, dtype, misaligned);
      at::Tensor targets = make_targets(67, 50257, cuda);
      targets.index_put_({5}, 50257);  // out of range
      const at::Tensor x = logits.to(at::kDouble);
      at::Tensor want = x.softmax(1);
      const at::Tensor counted = targets.ge(0).logical_and(targets.lt(50257));
      const at::Tensor index = targets.clamp(0, 50256).unsqueeze(1);
      want.scatter_(1, index, want.gather(1, index) - 1);
      want.masked_fill_(targets.eq(kIgnoreIndex).unsqueeze(1), 0.0);
      want.masked_fill_(counted.logical_not().unsqueeze(1), NAN);
      const at::Tensor want_loss =
          (x.logsumexp(1) - x.gather(1, index).squeeze(1)).masked_fill(targets.eq(kIgnoreIndex), 0);
      test::poison({{{67}, dtype == at::kDouble ? at::kDouble : at::kFloat}}, cuda.device());
      const at::Tensor row_loss =
          detail::fused_classifier_forward_grad_cuda(logits, targets, kIgnoreIndex);
      const double tol = dtype == at::kFloat || dtype == at::kDouble ? 1e-5 : 1e-2;
      const at::Tensor ok = counted.nonzero().squeeze(1);
      EXPECT_LT(rel_error(row_loss.index_select(0, ok), want_loss.index_select(0, ok)), tol);
      EXPECT_TRUE(row_loss[5].isnan().item<bool>());
      EXPECT_LT(rel_error(logits.index_select(0, ok), want.index_select(0, ok)), tol);
      EXPECT_TRUE(logits[5].isnan().all().item<bool>());
    }
  }
}

TEST(LmHeadLossCudaTest, ScaleKernelRoundsOnceOnEveryLengthAndAlignment) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor scale = at::full({}, 1.0 / 3.0, cuda.dtype(at::kFloat));
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t n : {1, 7, 8, 9, 1000003}) {
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << dtype << " n " << n << " offset " << offset);
        const at::Tensor buffer = at::randn({n + 1}, cuda).to(dtype);
        const at::Tensor t = buffer.narrow(0, offset, n);
        const at::Tensor want = (t.to(at::kFloat) * scale).to(dtype);  // float, rounded once
        detail::scale_cuda_(t, scale);
        EXPECT_TRUE(at::equal(t, want));
      }
    }
  }
}

TEST(LmHeadLossCudaTest, CastsAsAutocastAndGivesFloatWeightGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SCOPED_TRACE("seed " + std::to_string(test::fresh_seed()));
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor hidden = at::randn({256, 64}, cuda);
  const at::Tensor weight = at::randn({1000, 64}, cuda) * 0.1;
  const at::Tensor targets = make_targets(256, 1000, cuda);
  auto under_autocast = [&](auto op) {
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    HeadResult r = head_loss_and_grads(op, hidden, weight, targets);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
    return r;
  };
  const HeadResult got = under_autocast([](const at::Tensor& h, const at::Tensor& w,
                                           const at::Tensor& t) { return lm_head_loss(h, w, t); });
  const HeadResult want = under_autocast(kHeadReference);
  EXPECT_EQ(got.d_weight.scalar_type(), at::kFloat);
  EXPECT_EQ(got.d_hidden.scalar_type(), at::kFloat);
  EXPECT_LT(rel_error(got.loss, want.loss), 1e-2);
  EXPECT_LT(rel_error(got.d_hidden, want.d_hidden), 1e-2);
  EXPECT_LT(rel_error(got.d_weight, want.d_weight), 1e-2);
}

}  // namespace
}  // namespace brrr
