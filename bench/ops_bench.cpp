// bench_ops_bench: each fused op of brrr::ops against the eager ATen sequence it replaces, at the
// GPT-2 124M shapes of one B=16, T=1024 step (N = 16384 rows, C = 768, V = 50304) and an ImageNet
// batch (256 x 3 x 224 x 224), bf16. Also the two ceilings: a device-to-device copy (bytes read +
// written) and the lm-head matmuls (forward, d(input), d(weight)) that the classifier rides on.
// bench/torch_ops.py times the same ops in PyTorch eager and under torch.compile.
//
//   bench_ops_bench [--repeats 20] [--csv FILE] [--only NAME,...]
// --only runs those benches alone: ceilings, classifier, residual_layernorm, residual_bias,
// bias_gelu, bias_grad, image_input, batch_norm_act (ResNet-50's norms at batch 256), mlp_gelu,
// wgrad_bgrad (the last two: cuBLASLt's epilogues against brrr's kernels).
// Prints CSV `op,impl,pass,ms,gb_per_s`: pass `fwd` or `fwd+bwd`; gb_per_s counts the fewest bytes
// the op must move (each input read once, each output written once), so it compares with the
// copy ceiling. An impl ending in `_graph` is the same work captured in a CUDA graph and
// replayed: the kernels' GPU time without the host's dispatch (see graph_ms); `_graph_per_call`
// is a call's share of a graph of kCallsPerGraph calls on their own inputs, the graph's launch
// spread over them: what the op costs inside a graphed step (see graph_ms_per_call).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ops/batch_norm_act.h"
#include "core/ops/bias_gelu.h"
#include "core/ops/fused_classifier.h"
#include "core/ops/image_input.h"
#include "core/ops/linear_bias.h"
#include "core/ops/residual_layernorm.h"

namespace {

constexpr int64_t kRows = 16 * 1024, kC = 768, kV = 50304;

// Median milliseconds of `fn` over `repeats` runs, each timed with CUDA events; `prepare` runs
// before each timed run, outside the events (fresh inputs for ops that overwrite theirs).
double time_ms(
    const std::function<void()>& fn, int repeats, const std::function<void()>& prepare = [] {}) {
  for (int i = 0; i < 3; ++i) {  // warm-up: allocator, handles, autotuning
    prepare();
    fn();
  }
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    prepare();
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    fn();
    stop.record();
    stop.synchronize();
    ms.push_back(start.elapsed_time(stop));
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

// The backward passes are timed through torch::autograd::grad, which returns the gradients
// instead of adding them into .grad: no accumulation kernels inside the measured work.
//
// Median milliseconds a call of fn(i) takes inside a CUDA graph, the time a kernel's bytes are
// measured against: fn(0), ..., fn(calls - 1) captured one after another in one graph (after a
// warm-up on the capture stream), as a graphed step runs them, and the replay timed between events
// and divided by calls. Host dispatch and autograd's hand-offs to its device thread are outside
// the measurement. With calls = 1 (graph_ms) the time also holds the graph's launch, a few
// microseconds that weigh on ops of ten. fn(i) should read its own (i-th) set of inputs, so that
// the calls do not find each other's data in L2 (50 MB on an H200).
double graph_ms_per_call(const std::function<void(int)>& fn, int calls, int repeats) {
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
  side.synchronize();
  at::cuda::getCurrentCUDAStream().synchronize();
  const c10::cuda::CUDAStreamGuard guard(side);
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < calls; ++c) fn(c);
  }
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  for (int c = 0; c < calls; ++c) fn(c);
  graph.capture_end();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    graph.replay();
    stop.record();
    stop.synchronize();
    ms.push_back(start.elapsed_time(stop) / calls);
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

// Median milliseconds of fn's GPU work alone: fn captured once in a CUDA graph and the graph
// replayed (graph_ms_per_call with one call).
double graph_ms(const std::function<void()>& fn, int repeats) {
  return graph_ms_per_call([&](int) { fn(); }, 1, repeats);
}

// The fastest of a cuBLASLt heuristic's candidates: `run` runs the GEMM with candidate `algo`
// and returns how many candidates the heuristic offered. `algo` is set to each in turn; one these
// shapes reject (run throws, eagerly, not inside a capture) is skipped, the others are timed by
// `time`. `algo` is left at the fastest, whose milliseconds are returned.
double fastest_candidate(const char* what, int& algo, const std::function<int()>& run,
                         const std::function<double()>& time) {
  const int candidates = run();
  double best = std::numeric_limits<double>::infinity();
  int best_algo = 0;
  for (int c = 0; c < candidates; ++c) {
    algo = c;
    try {
      run();
    } catch (const std::exception&) {
      continue;
    }
    const double ms = time();
    std::fprintf(stderr, "%s: candidate %d of %d: %.4f ms\n", what, c, candidates, ms);
    if (ms < best) best = ms, best_algo = c;
  }
  algo = best_algo;
  std::fprintf(stderr, "%s: fastest candidate %d (%.4f ms)\n", what, best_algo, best);
  return best;
}

// Calls a _per_call row captures (graph_ms_per_call), each on its own inputs.
constexpr int kCallsPerGraph = 8;

struct Out {
  std::FILE* file = nullptr;
  void row(const std::string& op, const std::string& impl, const std::string& pass, double ms,
           double bytes) {
    const std::string line = fmt::format("{},{},{},{:.4f},{:.1f}\n", op, impl, pass, ms,
                                         bytes > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0);
    std::fputs(line.c_str(), stdout);
    if (file) std::fputs(line.c_str(), file);
  }
};

at::Tensor randn(std::vector<int64_t> shape, at::ScalarType dtype) {
  return at::randn(shape, at::TensorOptions().device(at::kCUDA).dtype(dtype));
}

void bench_ceilings(Out& out, int repeats) {
  const int64_t bytes = int64_t{2} << 30;  // 2 GiB each way
  at::Tensor a = at::empty({bytes}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
  at::Tensor b = at::empty_like(a);
  a.random_(0, 255);
  out.row("copy", "ceiling", "fwd", time_ms([&] { b.copy_(a); }, repeats), 2.0 * bytes);
  const at::Tensor y = randn({kRows, kC}, at::kBFloat16);
  const at::Tensor w = randn({kV, kC}, at::kBFloat16);
  const at::Tensor g = randn({kRows, kV}, at::kBFloat16);
  const double fwd = time_ms([&] { at::mm(y, w.t()); }, repeats);
  const double bwd = time_ms(
      [&] {
        at::mm(g, w);
        at::mm(g.t(), y);
      },
      repeats);
  out.row("lm_head_matmuls", "cublas", "fwd", fwd, 0);
  out.row("lm_head_matmuls", "cublas", "fwd+bwd", fwd + bwd, 0);
}

void bench_classifier(Out& out, int repeats) {
  const at::Tensor source = randn({kRows, kV}, at::kBFloat16);
  const at::Tensor targets =
      at::randint(0, kV, {kRows}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
  at::Tensor logits = source.clone().requires_grad_(true);
  const double logits_bytes = static_cast<double>(source.nbytes());
  auto refresh = [&] {  // the fused backward overwrites the logits with their gradient
    at::NoGradGuard no_grad;
    logits.copy_(source);
    logits.mutable_grad() = at::Tensor();
  };
  auto eager = [&](bool backward) {
    at::Tensor loss = at::nll_loss(at::log_softmax(logits, 1, at::kFloat), targets);
    if (backward) loss.backward();
  };
  auto fused = [&](bool backward) {
    at::Tensor loss = brrr::fused_classifier(logits, targets);
    if (backward) loss.backward();
  };
  out.row("classifier", "eager", "fwd", time_ms([&] { eager(false); }, repeats, refresh),
          logits_bytes);
  out.row("classifier", "brrr", "fwd", time_ms([&] { fused(false); }, repeats, refresh),
          logits_bytes);
  out.row("classifier", "eager", "fwd+bwd", time_ms([&] { eager(true); }, repeats, refresh),
          3 * logits_bytes);
  out.row("classifier", "brrr", "fwd+bwd", time_ms([&] { fused(true); }, repeats, refresh),
          3 * logits_bytes);

  // The head with its loss, as the step runs it: y @ W^T -> loss -> d(y), d(W).
  const at::Tensor y = randn({kRows, kC}, at::kBFloat16).requires_grad_(true);
  const at::Tensor w = randn({kV, kC}, at::kBFloat16).requires_grad_(true);
  auto head = [&](bool fused_loss) {
    const at::Tensor z = at::mm(y, w.t());
    const at::Tensor loss = fused_loss ? brrr::fused_classifier(z, targets)
                                       : at::nll_loss(at::log_softmax(z, 1, at::kFloat), targets);
    loss.backward();
  };
  auto no_grads = [&] {
    y.mutable_grad() = at::Tensor();
    w.mutable_grad() = at::Tensor();
  };
  out.row("head+loss", "eager", "fwd+bwd", time_ms([&] { head(false); }, repeats, no_grads), 0);
  out.row("head+loss", "brrr", "fwd+bwd", time_ms([&] { head(true); }, repeats, no_grads), 0);
  // lm_head_loss: the same head, its forward kernel leaving the unscaled gradient in the logits,
  // the backward scaling the matmuls' outputs (the GPT step's path).
  out.row("head+loss", "brrr_one_pass", "fwd+bwd",
          time_ms([&] { brrr::lm_head_loss(y, w, targets).backward(); }, repeats, no_grads), 0);
  // In chunks of rows: each chunk's gradients in the forward, d W summed in float, the (N, V)
  // logits never held (model.head_chunk_rows).
  for (int64_t chunk : {8192, 4096, 2048}) {
    out.row(
        "head+loss", fmt::format("brrr_chunks_of_{}", chunk), "fwd+bwd",
        time_ms(
            [&] { brrr::lm_head_loss(y, w, targets, brrr::kIgnoreIndex, false, chunk).backward(); },
            repeats, no_grads),
        0);
  }
  // That forward kernel alone: reads each row, reads it again (L2) and writes the gradient.
  out.row("classifier", "brrr_fwd_grad", "fwd",
          time_ms(
              [&] {
                brrr::detail::fused_classifier_forward_grad_cuda(logits, targets,
                                                                 brrr::kIgnoreIndex);
              },
              repeats, refresh),
          2 * logits_bytes);
}

void bench_residual_layernorm(Out& out, int repeats) {
  const at::Tensor res = randn({kRows, kC}, at::kFloat).requires_grad_(true);
  const at::Tensor x = randn({kRows, kC}, at::kFloat).requires_grad_(true);
  const at::Tensor w = randn({kC}, at::kFloat).requires_grad_(true);
  const at::Tensor b = randn({kC}, at::kFloat).requires_grad_(true);
  const at::Tensor dy = randn({kRows, kC}, at::kBFloat16);
  const at::Tensor dres = randn({kRows, kC}, at::kFloat);
  const double n = static_cast<double>(kRows * kC);
  // fwd: read res, x (4 B each), write new_res (4 B) and y (2 B); bwd: read dy (2), d_new (4),
  // new_res (4), write d_res (4).
  const double fwd_bytes = n * 14, bwd_bytes = n * 14;
  auto eager = [&](bool backward) {
    const at::Tensor h = res + x;
    const at::Tensor y = at::layer_norm(h, {kC}, w, b, 1e-5).to(at::kBFloat16);
    if (backward) torch::autograd::grad({y, h}, {res, x, w, b}, {dy, dres});
  };
  auto fused = [&](bool backward) {
    auto [h, y] = brrr::residual_layernorm(res, x, w, b, 1e-5, at::kBFloat16);
    if (backward) torch::autograd::grad({y, h}, {res, x, w, b}, {dy, dres});
  };
  for (const bool bwd : {false, true}) {
    const char* pass = bwd ? "fwd+bwd" : "fwd";
    const double bytes = bwd ? fwd_bytes + bwd_bytes : fwd_bytes;
    out.row("residual_layernorm", "eager", pass, time_ms([&] { eager(bwd); }, repeats), bytes);
    out.row("residual_layernorm", "brrr", pass, time_ms([&] { fused(bwd); }, repeats), bytes);
    out.row("residual_layernorm", "eager_graph", pass, graph_ms([&] { eager(bwd); }, repeats),
            bytes);
    out.row("residual_layernorm", "brrr_graph", pass, graph_ms([&] { fused(bwd); }, repeats),
            bytes);
  }
  // The forward kernel alone, its row in registers (the op's path at C = 768) and re-read from
  // the cache (its path for wider rows), the latter what it was before the registers.
  for (const bool registers : {true, false}) {
    out.row("residual_layernorm", registers ? "kernel_registers_graph" : "kernel_cache_graph",
            "fwd",
            graph_ms(
                [&] {
                  brrr::detail::residual_layernorm_forward_cuda(res, x, w, b, 1e-5, at::kBFloat16,
                                                                {}, registers);
                },
                repeats),
            fwd_bytes);
  }
}

// GPT's use: the branch's c_proj output in bf16 (its GEMM run without the bias) and the c_proj
// bias added by residual_layernorm (x_bias), whose backward gives the bias gradient from its own
// pass over d(x); against the same with the bias in the GEMM and its gradient summed apart (ATen's
// reduction, or brrr's column_sum: the fused path before x_bias).
void bench_residual_bias(Out& out, int repeats) {
  struct Inputs {
    at::Tensor res, x, xb, w, b, dy, dres;
  };
  std::vector<Inputs> sets;  // kCallsPerGraph of them, for the _per_call rows
  for (int i = 0; i < kCallsPerGraph; ++i) {
    sets.push_back({randn({kRows, kC}, at::kFloat).requires_grad_(true),
                    randn({kRows, kC}, at::kBFloat16).requires_grad_(true),
                    randn({kC}, at::kFloat).requires_grad_(true),
                    randn({kC}, at::kFloat).requires_grad_(true),
                    randn({kC}, at::kFloat).requires_grad_(true), randn({kRows, kC}, at::kBFloat16),
                    randn({kRows, kC}, at::kFloat)});
  }
  // fwd: read res (4 B), x (2), write new_res (4), y (2); bwd: read dy (2), d_new (4), new_res (4),
  // write d_res (4), d_x (2).
  const double n = static_cast<double>(kRows * kC), fwd_bytes = n * 12, bytes = n * 28;
  // Eager: the bias already in x, as the GEMM's epilogue adds it.
  auto eager = [&](bool backward, int i = 0) {
    const Inputs& in = sets[i];
    const at::Tensor h = in.res + in.x;
    const at::Tensor y = at::layer_norm(h, {kC}, in.w, in.b, 1e-5).to(at::kBFloat16);
    if (!backward) return;
    const auto g = torch::autograd::grad({y, h}, {in.res, in.x, in.w, in.b}, {in.dy, in.dres});
    at::sum(g[1], 0);
  };
  auto separate = [&](bool backward, int i = 0) {
    const Inputs& in = sets[i];
    auto [h, y] = brrr::residual_layernorm(in.res, in.x, in.w, in.b, 1e-5, at::kBFloat16);
    if (!backward) return;
    const auto g = torch::autograd::grad({y, h}, {in.res, in.x, in.w, in.b}, {in.dy, in.dres});
    brrr::column_sum(g[1]);
  };
  auto fused = [&](bool backward, int i = 0) {
    const Inputs& in = sets[i];
    auto [h, y] = brrr::residual_layernorm(in.res, in.x, in.w, in.b, 1e-5, at::kBFloat16, in.xb);
    if (backward) {
      torch::autograd::grad({y, h}, {in.res, in.x, in.w, in.b, in.xb}, {in.dy, in.dres});
    }
  };
  for (const bool bwd : {false, true}) {
    const char* pass = bwd ? "fwd+bwd" : "fwd";
    const double nbytes = bwd ? bytes : fwd_bytes;
    // Timed with events too, as bench/torch_ops.py times torch.compile's version.
    out.row("residual_bias", "brrr", pass, time_ms([&] { fused(bwd); }, repeats), nbytes);
    out.row("residual_bias", "eager_graph", pass, graph_ms([&] { eager(bwd); }, repeats), nbytes);
    out.row("residual_bias", "brrr_separate_graph", pass, graph_ms([&] { separate(bwd); }, repeats),
            nbytes);
    out.row("residual_bias", "brrr_graph", pass, graph_ms([&] { fused(bwd); }, repeats), nbytes);
    out.row("residual_bias", "brrr_separate_graph_per_call", pass,
            graph_ms_per_call([&](int i) { separate(bwd, i); }, kCallsPerGraph, repeats), nbytes);
    out.row("residual_bias", "brrr_graph_per_call", pass,
            graph_ms_per_call([&](int i) { fused(bwd, i); }, kCallsPerGraph, repeats), nbytes);
  }
  // The backward kernels alone (with their sum_partials launch), x_bias's sums in registers (the
  // op's path at C = 768) and in a third shared-memory slice (what it was before).
  std::vector<std::vector<at::Tensor>> saved;  // new_res, y, mean, rstd of each set
  for (const Inputs& in : sets) {
    saved.push_back(brrr::detail::residual_layernorm_forward_cuda(
        in.res.detach(), in.x.detach(), in.w.detach(), in.b.detach(), 1e-5, at::kBFloat16,
        in.xb.detach()));
  }
  for (const bool registers : {true, false}) {
    auto backward = [&](int i) {
      const auto& f = saved[i];
      brrr::detail::residual_layernorm_backward_cuda(sets[i].dy, sets[i].dres, f[0],
                                                     sets[i].w.detach(), f[2], f[3], at::kBFloat16,
                                                     true, registers);
    };
    const std::string impl = registers ? "kernel_dxb_registers" : "kernel_dxb_shared";
    out.row("residual_bias", impl + "_graph", "bwd", graph_ms([&] { backward(0); }, repeats),
            bytes - fwd_bytes);
    out.row("residual_bias", impl + "_graph_per_call", "bwd",
            graph_ms_per_call(backward, kCallsPerGraph, repeats), bytes - fwd_bytes);
  }
}

void bench_bias_gelu(Out& out, int repeats) {
  const at::Tensor x = randn({kRows, 4 * kC}, at::kBFloat16).requires_grad_(true);
  const at::Tensor bias = randn({4 * kC}, at::kFloat).requires_grad_(true);
  const at::Tensor dy = randn({kRows, 4 * kC}, at::kBFloat16);
  const double n = static_cast<double>(kRows * 4 * kC);
  auto eager = [&](bool backward) {  // autocast's pattern: bias added in the GEMM's dtype
    const at::Tensor y = at::gelu(x + bias.to(at::kBFloat16), "tanh");
    if (backward) torch::autograd::grad({y}, {x, bias}, {dy});
  };
  auto fused = [&](bool backward) {
    const at::Tensor y = brrr::bias_gelu(x, bias);
    if (backward) torch::autograd::grad({y}, {x, bias}, {dy});
  };
  for (const bool bwd : {false, true}) {
    const char* pass = bwd ? "fwd+bwd" : "fwd";
    const double bytes = bwd ? n * 4 + n * 6 : n * 4;  // fwd: x in, y out; bwd: dy, x in, dx out
    out.row("bias_gelu", "eager", pass, time_ms([&] { eager(bwd); }, repeats), bytes);
    out.row("bias_gelu", "brrr", pass, time_ms([&] { fused(bwd); }, repeats), bytes);
    out.row("bias_gelu", "eager_graph", pass, graph_ms([&] { eager(bwd); }, repeats), bytes);
    out.row("bias_gelu", "brrr_graph", pass, graph_ms([&] { fused(bwd); }, repeats), bytes);
  }
}

// cuBLASLt matmul D = op(A) B (column-major, as cuBLAS sees row-major tensors: a row-major
// (r, c) tensor is a column-major c x r matrix), bf16 in and out, float accumulation, with an
// epilogue: m x n output, inner size k; A is stored k x m (trans_a = T) or m x k (N); B k x n
// (trans_b = N) or n x k (T).
// `bias` is the epilogue's bias vector (m,) (its gradient for the BGRAD epilogues), `aux` its
// (m x n, ld m) auxiliary matrix (GELU's input). Descriptors are made per call (host work only,
// so the call can be captured in a CUDA graph). Runs the `algo`-th of cuBLASLt's heuristic's
// candidates (0: its first choice, what a plain caller gets) and returns how many it offered.
int lt_gemm(cublasOperation_t trans_a, const at::Tensor& a, const at::Tensor& b, at::Tensor& d,
            int64_t m, int64_t n, int64_t k, cublasLtEpilogue_t epilogue, void* bias, void* aux,
            at::Tensor& workspace, int algo = 0, cublasOperation_t trans_b = CUBLAS_OP_N) {
  auto check = [](cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error(
          fmt::format("cuBLASLt {} failed: status {}", what, static_cast<int>(status)));
    }
  };
  // The descriptors are owned, so they are destroyed on every way out (a candidate these shapes
  // reject throws).
  cublasLtMatmulDesc_t raw_desc = nullptr;
  check(cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const std::unique_ptr<cublasLtMatmulDescOpaque_t, decltype(&cublasLtMatmulDescDestroy)> desc(
      raw_desc, cublasLtMatmulDescDestroy);
  auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto& value, const char* what) {
    check(cublasLtMatmulDescSetAttribute(desc.get(), attribute, &value, sizeof(value)), what);
  };
  const int64_t aux_ld = m;
  set(CUBLASLT_MATMUL_DESC_TRANSA, trans_a, "TRANSA");
  set(CUBLASLT_MATMUL_DESC_TRANSB, trans_b, "TRANSB");
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE");
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "BIAS_POINTER");
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, "AUX_POINTER");
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld, "AUX_LD");
  auto layout = [&](int64_t rows, int64_t cols, const char* what) {  // bf16, column-major
    cublasLtMatrixLayout_t raw = nullptr;
    check(cublasLtMatrixLayoutCreate(&raw, CUDA_R_16BF, static_cast<uint64_t>(rows),
                                     static_cast<uint64_t>(cols), rows),
          what);
    return std::unique_ptr<cublasLtMatrixLayoutOpaque_t, decltype(&cublasLtMatrixLayoutDestroy)>(
        raw, cublasLtMatrixLayoutDestroy);
  };
  const bool ta = trans_a == CUBLAS_OP_T;
  const bool tb = trans_b == CUBLAS_OP_T;
  const auto la = layout(ta ? k : m, ta ? m : k, "A"), lb = layout(tb ? n : k, tb ? k : n, "B");
  const auto ld = layout(m, n, "D");
  cublasLtMatmulPreference_t raw_pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&raw_pref), "PreferenceCreate");
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                        decltype(&cublasLtMatmulPreferenceDestroy)>
      pref(raw_pref, cublasLtMatmulPreferenceDestroy);
  const uint64_t ws_bytes = workspace.nbytes();
  check(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws_bytes, sizeof(ws_bytes)),
        "MAX_WORKSPACE_BYTES");
  const cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), la.get(), lb.get(), ld.get(), ld.get(),
                                       pref.get(), kCandidates, results, &found),
        "AlgoGetHeuristic");
  if (algo >= found) throw std::runtime_error("cuBLASLt: no such algorithm for this epilogue");
  const float alpha = 1, beta = 0;
  check(cublasLtMatmul(handle, desc.get(), &alpha, a.data_ptr(), la.get(), b.data_ptr(), lb.get(),
                       &beta, d.data_ptr(), ld.get(), d.data_ptr(), ld.get(), &results[algo].algo,
                       workspace.data_ptr(), ws_bytes, at::cuda::getCurrentCUDAStream()),
        "Matmul");
  return found;
}

// The MLP's first GEMM with its bias and GELU, and the backward of the GELU and the bias (with the
// c_proj input-gradient GEMM that feeds it), two ways:
//   brrr:     fwd  pre = x W1^T (cuBLAS), a = bias_gelu(pre, b1)               (saves pre)
//             bwd  d a = d out W2 (cuBLAS), {d pre, d b1} = bias_gelu backward
//   cublaslt: fwd  a, aux = x W1^T + b1 with the GELU_AUX_BIAS epilogue        (saves aux)
//             bwd  d pre, d b1 = d out W2 with the DGELU_BGRAD epilogue (reads aux)
// The GEMMs both paths share (d W1, d x, d W2) are left out. Also ATen's at::_addmm_activation
// (the GELU_BIAS epilogue without aux: no backward can use it, so forward only), for the aux's
// cost. cuBLASLt runs its heuristic's first choice (`cublaslt`), then the fastest of its up to 8
// candidates (`cublaslt_fastest_graph`). The two paths' results are compared first (bf16
// tolerance), with either choice: both must compute the same.
void bench_mlp_gelu(Out& out, int repeats) {
  const int64_t n = kRows, c = kC, dd = 4 * kC;
  const at::Tensor x = randn({n, c}, at::kBFloat16);
  const at::Tensor w1 = randn({dd, c}, at::kBFloat16).mul_(0.03);
  const at::Tensor b1 = randn({dd}, at::kBFloat16);
  const at::Tensor w2 = randn({c, dd}, at::kBFloat16).mul_(0.03);
  const at::Tensor d_out = randn({n, c}, at::kBFloat16);
  at::Tensor workspace =
      at::empty({int64_t{32} << 20}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
  at::Tensor pre, a, d_pre, d_b1;
  auto brrr_fwd = [&] {
    pre = at::mm(x, w1.t());
    a = brrr::detail::bias_gelu_forward_cuda(pre, b1);
  };
  auto brrr_bwd = [&] {
    const std::vector<at::Tensor> g =
        brrr::detail::bias_gelu_backward_cuda(at::mm(d_out, w2), pre, b1);
    d_pre = g[0];
    d_b1 = g[1];
  };
  at::Tensor lt_a = at::empty({n, dd}, x.options());
  at::Tensor aux = at::empty_like(lt_a), lt_d_pre = at::empty_like(lt_a);
  at::Tensor lt_d_b1 = at::empty_like(b1);
  int fwd_algo = 0, bwd_algo = 0;  // the heuristic's first choice, then the fastest candidate
  auto lt_fwd = [&] {
    return lt_gemm(CUBLAS_OP_T, w1, x, lt_a, dd, n, c, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                   b1.data_ptr(), aux.data_ptr(), workspace, fwd_algo);
  };
  auto lt_bwd = [&] {
    return lt_gemm(CUBLAS_OP_N, w2, d_out, lt_d_pre, dd, n, c, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                   lt_d_b1.data_ptr(), aux.data_ptr(), workspace, bwd_algo);
  };
  // Same results (poisoned first), within bf16 rounding of each path's intermediate roundings.
  auto check_same = [&] {
    for (at::Tensor* t : {&lt_a, &aux, &lt_d_pre, &lt_d_b1}) t->fill_(NAN);
    brrr_fwd();
    brrr_bwd();
    lt_fwd();
    lt_bwd();
    auto rel = [](const at::Tensor& got, const at::Tensor& want) {
      return (got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<double>() /
             want.to(at::kFloat).abs().max().item<double>();
    };
    const double e_a = rel(lt_a, a), e_aux = rel(aux, pre.to(at::kFloat) + b1.to(at::kFloat));
    const double e_d = rel(lt_d_pre, d_pre), e_b = rel(lt_d_b1, d_b1);
    std::fprintf(stderr,
                 "mlp_gelu: cublaslt (candidates %d, %d) vs brrr, max |diff| / max |brrr|: a "
                 "%.2e, aux %.2e, d pre %.2e, d b1 %.2e\n",
                 fwd_algo, bwd_algo, e_a, e_aux, e_d, e_b);
    if (!(e_a < 2e-2 && e_aux < 2e-2 && e_d < 2e-2 && e_b < 2e-2)) {
      throw std::runtime_error("mlp_gelu: the cuBLASLt epilogues do not compute what brrr does");
    }
  };
  check_same();
  auto aten_fwd = [&] { at::_addmm_activation(b1, x, w1.t(), 1, 1, /*use_gelu=*/true); };
  out.row("mlp_gelu", "aten_gelu_bias_no_aux_graph", "fwd", graph_ms(aten_fwd, repeats), 0);
  const std::vector<std::pair<const char*, std::function<void()>>> passes = {
      {"fwd", brrr_fwd}, {"bwd", brrr_bwd}, {"fwd+bwd", [&] {
                                               brrr_fwd();
                                               brrr_bwd();
                                             }}};
  const std::vector<std::function<void()>> lt_passes = {lt_fwd, lt_bwd, [&] {
                                                          lt_fwd();
                                                          lt_bwd();
                                                        }};
  for (size_t i = 0; i < passes.size(); ++i) {
    const char* pass = passes[i].first;
    out.row("mlp_gelu", "brrr", pass, time_ms(passes[i].second, repeats), 0);
    out.row("mlp_gelu", "cublaslt", pass, time_ms(lt_passes[i], repeats), 0);
    out.row("mlp_gelu", "brrr_graph", pass, graph_ms(passes[i].second, repeats), 0);
    out.row("mlp_gelu", "cublaslt_graph", pass, graph_ms(lt_passes[i], repeats), 0);
  }
  // The fastest of the heuristic's candidates for each epilogue, then both passes with them.
  fastest_candidate("mlp_gelu fwd", fwd_algo, lt_fwd,
                    [&] { return graph_ms([&] { lt_fwd(); }, repeats); });
  fastest_candidate("mlp_gelu bwd", bwd_algo, lt_bwd,
                    [&] { return graph_ms([&] { lt_bwd(); }, repeats); });
  check_same();
  for (size_t i = 0; i < passes.size(); ++i) {
    out.row("mlp_gelu", "cublaslt_fastest_graph", passes[i].first, graph_ms(lt_passes[i], repeats),
            0);
  }
}

// A linear's bias gradient: the column sums of d y, (N, C) bf16 -> (C,), for GPT-2's two widths.
void bench_bias_grad(Out& out, int repeats) {
  for (const int64_t cols : {kC, 3 * kC}) {
    const at::Tensor g = randn({kRows, cols}, at::kBFloat16);
    const double bytes = static_cast<double>(kRows * cols) * 2;
    const std::string op = "bias_grad_" + std::to_string(cols);
    out.row(op.c_str(), "eager", "bwd", time_ms([&] { at::sum(g, 0); }, repeats), bytes);
    out.row(op.c_str(), "brrr", "bwd", time_ms([&] { brrr::column_sum(g); }, repeats), bytes);
    out.row(op.c_str(), "eager_graph", "bwd", graph_ms([&] { at::sum(g, 0); }, repeats), bytes);
    out.row(op.c_str(), "brrr_graph", "bwd", graph_ms([&] { brrr::column_sum(g); }, repeats),
            bytes);
    // A device-to-device copy of the same bytes: what a pass over this little data can reach.
    at::Tensor copy = at::empty_like(g);
    out.row(op.c_str(), "copy_graph", "bwd", graph_ms([&] { copy.copy_(g); }, repeats), 2 * bytes);
    // The same, a call's share of kCallsPerGraph in one graph, each on its own gradient; halves:
    // the destinations of a copy of half the rows.
    std::vector<at::Tensor> gs, copies, halves;
    for (int i = 0; i < kCallsPerGraph; ++i) {
      gs.push_back(randn({kRows, cols}, at::kBFloat16));
      copies.push_back(at::empty_like(gs.back()));
      halves.push_back(at::empty({kRows / 2, cols}, g.options()));
    }
    out.row(op.c_str(), "eager_graph_per_call", "bwd",
            graph_ms_per_call([&](int i) { at::sum(gs[i], 0); }, kCallsPerGraph, repeats), bytes);
    out.row(op.c_str(), "brrr_graph_per_call", "bwd",
            graph_ms_per_call([&](int i) { brrr::column_sum(gs[i]); }, kCallsPerGraph, repeats),
            bytes);
    out.row(op.c_str(), "copy_graph_per_call", "bwd",
            graph_ms_per_call([&](int i) { copies[i].copy_(gs[i]); }, kCallsPerGraph, repeats),
            2 * bytes);
    // A copy of half the rows: as many bytes moved (read + written) as the sum reads.
    out.row(op.c_str(), "copy_half_graph_per_call", "bwd",
            graph_ms_per_call([&](int i) { halves[i].copy_(gs[i].narrow(0, 0, kRows / 2)); },
                              kCallsPerGraph, repeats),
            bytes);
    // Reads of the same bytes front to back by ATen's reductions (all elements; each row): what
    // a read-only pass over this little data reaches when it streams rows whole.
    out.row(op.c_str(), "read_sum_all_graph_per_call", "bwd",
            graph_ms_per_call([&](int i) { at::sum(gs[i]); }, kCallsPerGraph, repeats), bytes);
    out.row(op.c_str(), "read_row_sums_graph_per_call", "bwd",
            graph_ms_per_call([&](int i) { at::sum(gs[i], 1); }, kCallsPerGraph, repeats), bytes);
    // column_sum's two-launch path (partials, then sum_partials) where it takes one launch.
    out.row(op.c_str(), "brrr_two_launches_graph_per_call", "bwd",
            graph_ms_per_call([&](int i) { brrr::detail::column_sum_cuda(gs[i], false); },
                              kCallsPerGraph, repeats),
            bytes);
    out.row(op.c_str(), "brrr_two_launches_graph", "bwd",
            graph_ms([&] { brrr::detail::column_sum_cuda(g, false); }, repeats), bytes);
  }
}

// A linear's weight and bias gradients, d W = d y^T x (out, in) and d b = column sums of d y,
// two ways for GPT-2's three linear shapes (N = 16,384 rows):
//   separate: d W by ATen's GEMM, d b by brrr::column_sum (what linear_bias's backward runs)
//   bgradb:   one cuBLASLt GEMM with the BGRADB epilogue, which sums d y (its B) over the GEMM's
//             inner dimension while it reads it for d W
// In cuBLASLt's column-major terms d W^T = x^T d y: m = in, n = out, k = N; A = x stored m x k, B =
// d y stored n x k (transposed). The results are compared first (bf16 tolerance), outputs
// poisoned; times are a call's share of kCallsPerGraph calls in one graph, each on its own inputs.
void bench_wgrad_bgrad(Out& out, int repeats) {
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  for (const Shape& shape : {Shape{"c_attn", 3 * kC, kC}, Shape{"attn_c_proj", kC, kC},
                             Shape{"mlp_c_proj", kC, 4 * kC}}) {
    std::vector<at::Tensor> xs, dys, dws, dbs;
    for (int i = 0; i < kCallsPerGraph; ++i) {
      xs.push_back(randn({kRows, shape.in}, at::kBFloat16));
      dys.push_back(randn({kRows, shape.out}, at::kBFloat16));
      dws.push_back(at::empty({shape.out, shape.in}, xs.back().options()));
      dbs.push_back(at::empty({shape.out}, xs.back().options()));
    }
    at::Tensor workspace =
        at::empty({int64_t{32} << 20}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
    int algo = 0;
    auto lt = [&](int i, cublasLtEpilogue_t epilogue) {
      return lt_gemm(CUBLAS_OP_N, xs[i], dys[i], dws[i], shape.in, shape.out, kRows, epilogue,
                     epilogue == CUBLASLT_EPILOGUE_BGRADB ? dbs[i].data_ptr() : nullptr, nullptr,
                     workspace, algo, CUBLAS_OP_T);
    };
    auto check_same = [&] {
      dws[0].fill_(NAN);
      dbs[0].fill_(NAN);
      lt(0, CUBLASLT_EPILOGUE_BGRADB);
      const at::Tensor want_w = at::mm(dys[0].t(), xs[0]).to(at::kFloat);
      const at::Tensor want_b = dys[0].to(at::kDouble).sum(0).to(at::kFloat);
      const double e_w = (dws[0].to(at::kFloat) - want_w).abs().max().item<double>() /
                         want_w.abs().max().item<double>();
      const double e_b = (dbs[0].to(at::kFloat) - want_b).abs().max().item<double>() /
                         want_b.abs().max().item<double>();
      std::fprintf(stderr, "wgrad_bgrad %s (candidate %d): max |diff| / max: d W %.2e, d b %.2e\n",
                   shape.name, algo, e_w, e_b);
      if (!(e_w < 2e-2 && e_b < 2e-2)) {
        throw std::runtime_error("wgrad_bgrad: the BGRADB epilogue does not compute d W and d b");
      }
    };
    check_same();
    const std::string op = std::string("wgrad_bgrad_") + shape.name;
    auto per_call = [&](const std::function<void(int)>& fn) {
      return graph_ms_per_call(fn, kCallsPerGraph, repeats);
    };
    const double bytes_db = static_cast<double>(kRows * shape.out) * 2;
    out.row(op, "aten_mm", "bwd", per_call([&](int i) { at::mm_out(dws[i], dys[i].t(), xs[i]); }),
            0);
    out.row(op, "brrr_column_sum", "bwd", per_call([&](int i) { brrr::column_sum(dys[i]); }),
            bytes_db);
    out.row(op, "separate", "bwd", per_call([&](int i) {
              at::mm_out(dws[i], dys[i].t(), xs[i]);
              brrr::column_sum(dys[i]);
            }),
            0);
    out.row(op, "lt_default", "bwd", per_call([&](int i) { lt(i, CUBLASLT_EPILOGUE_DEFAULT); }), 0);
    out.row(op, "lt_bgradb", "bwd", per_call([&](int i) { lt(i, CUBLASLT_EPILOGUE_BGRADB); }), 0);
    // Every candidate the heuristic offers for BGRADB.
    const double best = fastest_candidate(
        op.c_str(), algo, [&] { return lt(0, CUBLASLT_EPILOGUE_BGRADB); },
        [&] { return per_call([&](int i) { lt(i, CUBLASLT_EPILOGUE_BGRADB); }); });
    check_same();
    out.row(op, "lt_bgradb_fastest", "bwd", best, 0);
  }
}

void bench_image_input(Out& out, int repeats) {
  const at::Tensor x = at::randint(0, 256, {256, 3, 224, 224},
                                   at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
  const at::Tensor scale = at::rand({3}, x.options().dtype(at::kFloat));
  const at::Tensor shift = at::rand({3}, x.options().dtype(at::kFloat));
  const double bytes = static_cast<double>(x.numel()) * 3;  // 1 B in, 2 B out
  const auto cl = at::MemoryFormat::ChannelsLast;
  out.row(
      "image_input", "eager", "fwd",
      time_ms([&] { brrr::image_input_reference(x, scale, shift, at::kBFloat16, cl); }, repeats),
      bytes);
  out.row("image_input", "brrr", "fwd",
          time_ms([&] { brrr::image_input(x, scale, shift, at::kBFloat16, cl); }, repeats), bytes);
  out.row("image_input", "brrr_graph", "fwd",
          graph_ms([&] { brrr::image_input(x, scale, shift, at::kBFloat16, cl); }, repeats), bytes);
}

// ResNet-50's batch norms at batch 256, bf16 channels-last, training: the stem's (no shortcut),
// a bottleneck's inner one, and two block ends (the shortcut added before the ReLU). eager is
// batch_norm_act_reference (at::batch_norm, the add, at::relu: what PyTorch eager runs); brrr is
// batch_norm_act (cuDNN's fused calls). Bytes: forward x (and the shortcut) in, y out; backward
// dy, x, y in, dx (and the shortcut's gradient) out.
void bench_batch_norm_act(Out& out, int repeats) {
  struct Shape {
    int64_t c, hw;
    bool residual;
  };
  const auto cl = at::MemoryFormat::ChannelsLast;
  for (const Shape& shape : {Shape{64, 112, false}, Shape{64, 56, false}, Shape{256, 56, true},
                             Shape{1024, 14, true}}) {
    const std::vector<int64_t> sizes = {256, shape.c, shape.hw, shape.hw};
    const at::Tensor x = randn(sizes, at::kBFloat16).contiguous(cl).requires_grad_(true);
    const at::Tensor r = shape.residual
                             ? randn(sizes, at::kBFloat16).contiguous(cl).requires_grad_(true)
                             : at::Tensor();
    const at::Tensor dy = randn(sizes, at::kBFloat16).contiguous(cl);
    const at::Tensor w = (randn({shape.c}, at::kFloat) * 0.1 + 1).requires_grad_(true);
    const at::Tensor b = randn({shape.c}, at::kFloat).requires_grad_(true);
    at::Tensor mean = at::zeros({shape.c}, w.options().requires_grad(false));
    at::Tensor var = at::ones({shape.c}, w.options().requires_grad(false));
    std::vector<at::Tensor> inputs = {x, w, b};
    if (shape.residual) inputs.push_back(r);
    auto run = [&](bool fused, bool backward) {
      const at::Tensor y =
          fused ? brrr::batch_norm_act(x, r, w, b, mean, var, true, 0.1, 1e-5, true)
                : brrr::batch_norm_act_reference(x, r, w, b, mean, var, true, 0.1, 1e-5, true);
      if (backward) torch::autograd::grad({y}, inputs, {dy});
    };
    const std::string op = fmt::format("batch_norm_act_{}x{}{}", shape.c, shape.hw,
                                       shape.residual ? "_add" : "");
    const double n = static_cast<double>(x.numel());
    const double extra = shape.residual ? 1 : 0;
    for (const bool bwd : {false, true}) {
      const char* pass = bwd ? "fwd+bwd" : "fwd";
      const double bytes = 2 * n * ((2 + extra) + (bwd ? 4 + extra : 0));
      out.row(op, "eager", pass, time_ms([&] { run(false, bwd); }, repeats), bytes);
      out.row(op, "brrr", pass, time_ms([&] { run(true, bwd); }, repeats), bytes);
      out.row(op, "eager_graph", pass, graph_ms([&] { run(false, bwd); }, repeats), bytes);
      out.row(op, "brrr_graph", pass, graph_ms([&] { run(true, bwd); }, repeats), bytes);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20;
  std::string csv, only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else if (flag == "--csv")
      csv = argv[i + 1];
    else if (flag == "--only")
      only = "," + std::string(argv[i + 1]) + ",";
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_ops_bench: needs a CUDA device\n");
    return 2;
  }
  try {
    Out out;
    if (!csv.empty()) out.file = std::fopen(csv.c_str(), "w");
    const std::string header = "op,impl,pass,ms,gb_per_s\n";
    std::fputs(header.c_str(), stdout);
    if (out.file) std::fputs(header.c_str(), out.file);
    const std::pair<const char*, void (*)(Out&, int)> benches[] = {
        {"ceilings", bench_ceilings},
        {"classifier", bench_classifier},
        {"residual_layernorm", bench_residual_layernorm},
        {"residual_bias", bench_residual_bias},
        {"bias_gelu", bench_bias_gelu},
        {"bias_grad", bench_bias_grad},
        {"image_input", bench_image_input},
        {"batch_norm_act", bench_batch_norm_act},
        {"mlp_gelu", bench_mlp_gelu},
        {"wgrad_bgrad", bench_wgrad_bgrad}};
    for (const auto& [name, bench] : benches) {
      if (only.empty() || only.find("," + std::string(name) + ",") != std::string::npos) {
        bench(out, repeats);
      }
    }
    if (out.file) std::fclose(out.file);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops_bench: %s\n", e.what());
    return 1;
  }
}
