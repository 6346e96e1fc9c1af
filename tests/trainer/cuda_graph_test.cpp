// train.cuda_graph on the GPU (each test skips without CUDA): a graphed run equals the eager run
// (bit for bit in fp32 without dropout), also with accumulation, clipping, a changing lr, fp16 loss
// scaling with skipped steps, dropout, a short last batch and a resume; a host sync inside the
// step falls back under auto and fails under true, leaving the process able to capture again;
// graph mode's eager steps run on the capture stream; batch_norm_act's cuDNN calls replay as they
// run eagerly, and a ResNet with fused norms trains graphed as it does eagerly.
#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops/batch_norm_act.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/step_graph.h"

namespace brrr {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

ExperimentConfig cuda_config(const std::string& name, int64_t steps) {
  ExperimentConfig c = base_config(temp_dir(name));
  c.run.device = "cuda";
  c.optim.fused = "auto";
  c.train.max_steps = steps;
  c.train.grad_accum_steps = 2;
  c.train.max_grad_norm = 0.5;  // small enough that most steps clip
  c.schedule.name = "cosine";
  c.schedule.warmup_steps = 5;  // the lr changes every step
  return c;
}

const MetricRecord& summary_of(const Trainer& trainer) {
  return trainer.history().back();
}

struct RunResult {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
  std::string cuda_graph;  // the summary's outcome
  std::vector<double> host_syncs;
  std::vector<double> loss_scales;
};

template <typename T = BlobTrainer>
RunResult train(ExperimentConfig config, const std::string& cuda_graph, const std::string& name) {
  config.train.cuda_graph = cuda_graph;
  config.run.name = name;
  T trainer(config);
  trainer.fit();
  RunResult run;
  run.losses = train_losses(trainer);
  run.weights = weights(trainer);
  run.cuda_graph = summary_of(trainer).text.at("cuda_graph");
  for (const auto& r : trainer.history()) {
    if (r.kind != RecordKind::kTrain) continue;
    run.host_syncs.push_back(r.values.at("host_syncs_per_step"));
    if (r.values.count("loss_scale")) run.loss_scales.push_back(r.values.at("loss_scale"));
  }
  return run;
}

void expect_same_run(const RunResult& graphed, const RunResult& eager, double tolerance) {
  ASSERT_EQ(graphed.losses.size(), eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    if (tolerance == 0) {
      EXPECT_EQ(graphed.losses[i], eager.losses[i]) << "logged step " << i + 1;
    } else {
      EXPECT_NEAR(graphed.losses[i], eager.losses[i], tolerance * std::abs(eager.losses[i]))
          << "logged step " << i + 1;
    }
  }
  ASSERT_EQ(graphed.weights.size(), eager.weights.size());
  for (size_t i = 0; i < eager.weights.size(); ++i) {
    if (tolerance == 0) {
      EXPECT_TRUE(at::equal(graphed.weights[i], eager.weights[i])) << "parameter " << i;
    } else {
      EXPECT_TRUE(at::allclose(graphed.weights[i], eager.weights[i], tolerance, tolerance))
          << "parameter " << i;
    }
  }
}

TEST(CudaGraphTest, GraphedRunEqualsEagerBitForBitInFp32) {
  SKIP_WITHOUT_CUDA();
  const ExperimentConfig c = cuda_config("graph_fp32", 50);
  const RunResult eager = train(c, "false", "eager");
  const RunResult graphed = train(c, "true", "graphed");
  EXPECT_EQ(eager.cuda_graph, "off: train.cuda_graph is false");
  EXPECT_EQ(graphed.cuda_graph, "captured");
  expect_same_run(graphed, eager, 0.0);
  // Steps 1-2 are the eager warm-up and step 3 the capture; every window after holds replays.
  for (size_t i = 3; i < graphed.host_syncs.size(); ++i) {
    EXPECT_EQ(graphed.host_syncs[i], 0.0) << "window " << i + 1;
  }
}

TEST(CudaGraphTest, Fp16LossScalingWithSkippedStepsMatchesEager) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = cuda_config("graph_fp16", 50);
  c.train.precision = "fp16";
  c.train.fp16.init_scale = std::pow(2.0, 40);  // fp16 gradients overflow: the first steps skip
  c.train.fp16.growth_interval = 4;             // and the scale also grows later on
  const RunResult eager = train(c, "false", "eager");
  const RunResult graphed = train(c, "auto", "graphed");
  EXPECT_EQ(graphed.cuda_graph, "captured");
  expect_same_run(graphed, eager, 1e-6);
  ASSERT_EQ(graphed.loss_scales.size(), eager.loss_scales.size());
  for (size_t i = 0; i < eager.loss_scales.size(); ++i) {
    EXPECT_EQ(graphed.loss_scales[i], eager.loss_scales[i]) << "window " << i + 1;
  }
  ASSERT_FALSE(eager.loss_scales.empty());
  EXPECT_LT(eager.loss_scales[5], std::pow(2.0, 36))
      << "steps were skipped and the scale backed off";
}

// A short last batch (100 examples, batch 16, drop_last off) runs eagerly between replays.
TEST(CudaGraphTest, AShortLastBatchRunsEagerlyBetweenReplays) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = cuda_config("graph_short", 30);
  c.train.grad_accum_steps = 1;
  c.data.drop_last = false;
  struct Trainer100 : BlobTrainer {
    explicit Trainer100(ExperimentConfig config) : BlobTrainer(std::move(config), 100) {}
  };
  const RunResult eager = train<Trainer100>(c, "false", "eager");
  const RunResult graphed = train<Trainer100>(c, "true", "graphed");
  EXPECT_EQ(graphed.cuda_graph, "captured");
  expect_same_run(graphed, eager, 0.0);
}

// Records the CUDA stream current in every training step's training_step call (captured ones
// included; not the evaluation's calls through validation_step).
class StreamTrainer : public BlobTrainer {
 public:
  explicit StreamTrainer(ExperimentConfig config) : BlobTrainer(std::move(config), 100) {}
  std::vector<c10::StreamId> streams;

  static c10::StreamId current_stream() {
    return c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(c10::Device(c10::kCUDA, 0)).id();
  }

 protected:
  // No evaluation: every training_step call is a training step's.
  DatasetPtr build_val_dataset() override { return nullptr; }
  StepOutput training_step(const Batch& batch) override {
    streams.push_back(current_stream());
    return BlobTrainer::training_step(batch);
  }
};

// Graph mode runs all of its steps' work on the capture stream: the warm-ups, the capture and the
// eager short-batch steps between replays (one stream's cuBLAS workspaces, not two).
TEST(CudaGraphTest, EveryEagerStepOfGraphModeRunsOnTheCaptureStream) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = cuda_config("graph_streams", 20);
  c.train.grad_accum_steps = 1;
  c.data.drop_last = false;  // 100 examples, batch 16: every 7th step is a short, eager one
  c.train.cuda_graph = "true";
  const c10::StreamId outside = StreamTrainer::current_stream();
  StreamTrainer graphed(c);
  graphed.fit();
  EXPECT_EQ(summary_of(graphed).text.at("cuda_graph"), "captured");
  // Steps 1-2 (the warm-ups), 3 (the capture) and the short steps 7 and 14; replays call nothing.
  ASSERT_EQ(graphed.streams.size(), 5u);
  for (size_t i = 0; i < graphed.streams.size(); ++i) {
    EXPECT_EQ(graphed.streams[i], graphed.streams[0]) << "training_step call " << i + 1;
  }
  EXPECT_NE(graphed.streams[0], outside) << "graph mode's steps ran on the current stream";

  c.train.cuda_graph = "false";
  c.run.name = "eager";
  StreamTrainer eager(c);
  eager.fit();
  ASSERT_EQ(eager.streams.size(), 20u);
  for (const c10::StreamId id : eager.streams) EXPECT_EQ(id, outside);
}

// A second graphed fit in one process captures on the first fit's stream, and so reuses its
// cuBLAS workspaces (66 MiB a stream for GPT-2, held for the process's life), instead of taking
// the next of ATen's pool streams.
TEST(CudaGraphTest, ASecondGraphedFitRunsOnTheFirstFitsCaptureStream) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = cuda_config("graph_refit", 6);
  c.train.grad_accum_steps = 1;
  c.train.cuda_graph = "true";
  StreamTrainer first(c);
  first.fit();
  c.run.name = "second";
  StreamTrainer second(c);
  second.fit();
  EXPECT_EQ(summary_of(second).text.at("cuda_graph"), "captured");
  ASSERT_FALSE(first.streams.empty());
  ASSERT_FALSE(second.streams.empty());
  EXPECT_EQ(second.streams.front(), first.streams.front());
}

// ...while StepGraphs alive at once capture on streams of their own (one stream cannot hold two
// captures), and a stream given back goes to the next StepGraph.
TEST(CudaGraphTest, StepGraphsAliveAtOnceHaveCaptureStreamsOfTheirOwn) {
  SKIP_WITHOUT_CUDA();
  const c10::Device cuda(c10::kCUDA, 0);
  auto stream_of = [](StepGraph& graph) {
    c10::StreamId id{};
    graph.run_on_capture_stream([&] { id = StreamTrainer::current_stream(); });
    return id;
  };
  auto a = std::make_unique<StepGraph>(cuda);
  StepGraph b(cuda);
  const c10::StreamId a_stream = stream_of(*a), b_stream = stream_of(b);
  EXPECT_NE(a_stream, b_stream);
  EXPECT_NE(a_stream, StreamTrainer::current_stream());
  a.reset();
  StepGraph c(cuda);
  EXPECT_EQ(stream_of(c), a_stream);
  EXPECT_EQ(stream_of(b), b_stream);
}

// Records the dropout mask of every step: a captured step writes it into one buffer, which the
// step's end copies out.
class MaskTrainer : public BlobTrainer {
 public:
  using BlobTrainer::BlobTrainer;
  std::vector<at::Tensor> masks;

 protected:
  StepOutput training_step(const Batch& batch) override {
    StepOutput out = BlobTrainer::training_step(batch);
    if (!mask_.defined()) mask_ = at::empty({4096}, batch.at("features").options());
    mask_.copy_(at::dropout(at::ones({4096}, mask_.options()), 0.5, /*train=*/true));
    return out;
  }
  void on_step_end(int64_t step) override {
    BlobTrainer::on_step_end(step);
    masks.push_back(mask_.cpu());
  }

 private:
  at::Tensor mask_;
};

TEST(CudaGraphTest, DropoutMasksAdvanceOnEveryReplayAsInEagerMode) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = cuda_config("graph_dropout", 12);
  c.model.dropout = 0.2;
  std::vector<std::vector<at::Tensor>> masks;
  std::vector<RunResult> runs;
  for (const char* mode : {"false", "true"}) {
    c.train.cuda_graph = mode;
    c.run.name = std::string("dropout_") + mode;
    MaskTrainer trainer(c);
    trainer.fit();
    masks.push_back(trainer.masks);
    runs.push_back({train_losses(trainer),
                    weights(trainer),
                    summary_of(trainer).text.at("cuda_graph"),
                    {},
                    {}});
  }
  EXPECT_EQ(runs[1].cuda_graph, "captured");
  expect_same_run(runs[1], runs[0], 1e-6);
  ASSERT_EQ(masks[1].size(), 12u);
  for (size_t step = 0; step < masks[1].size(); ++step) {
    EXPECT_TRUE(at::equal(masks[1][step], masks[0][step])) << "step " << step + 1;
    if (step > 0) {
      EXPECT_FALSE(at::equal(masks[1][step], masks[1][step - 1])) << "step " << step + 1;
    }
  }
}

TEST(CudaGraphTest, ResumeInGraphModeEqualsTheUninterruptedRun) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = cuda_config("graph_resume", 30);
  c.model.dropout = 0.1;
  c.train.cuda_graph = "true";
  c.run.name = "whole";
  BlobTrainer whole(c);
  whole.fit();

  c.run.name = "split";
  BlobTrainer first(c);
  first.stop_at = 12;  // a checkpoint after step 12, taken in graph mode
  first.fit();
  ASSERT_EQ(first.step(), 12);
  BlobTrainer second(c);
  second.fit("auto");
  EXPECT_EQ(summary_of(second).text.at("cuda_graph"), "captured");

  const std::vector<double> all = train_losses(whole);
  const std::vector<double> resumed = train_losses(second);
  ASSERT_EQ(all.size(), 30u);
  ASSERT_EQ(resumed.size(), 18u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_NEAR(resumed[i], all[12 + i], 1e-6 * std::abs(all[12 + i])) << "step " << 13 + i;
  }
  const auto a = weights(whole), b = weights(second);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::allclose(a[i], b[i], 1e-6, 1e-6)) << i;
}

// A training_step that reads the loss on the host every step (a sync a graph cannot hold).
class SyncingTrainer : public BlobTrainer {
 public:
  using BlobTrainer::BlobTrainer;
  double last_loss = 0;

 protected:
  StepOutput training_step(const Batch& batch) override {
    StepOutput out = BlobTrainer::training_step(batch);
    last_loss = out.loss.item<double>();
    return out;
  }
};

TEST(CudaGraphTest, AHostSyncInTheStepFallsBackToEagerUnderAuto) {
  SKIP_WITHOUT_CUDA();
  const ExperimentConfig c = cuda_config("graph_sync_auto", 12);
  const RunResult eager = train<SyncingTrainer>(c, "false", "eager");
  const RunResult fallback = train<SyncingTrainer>(c, "auto", "fallback");
  EXPECT_EQ(fallback.cuda_graph.rfind("off: train.cuda_graph: the step runs eagerly", 0), 0u)
      << fallback.cuda_graph;
  EXPECT_NE(fallback.cuda_graph.find("synchronises the host with the device"), std::string::npos)
      << fallback.cuda_graph;
  // The refused capture left nothing behind: the run is the eager run, bit for bit.
  expect_same_run(fallback, eager, 0.0);
}

TEST(CudaGraphTest, AHostSyncInTheStepFailsUnderTrueAndTheProcessCanCaptureAgain) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = cuda_config("graph_sync_true", 8);
  c.train.cuda_graph = "true";
  SyncingTrainer trainer(c);
  try {
    trainer.fit();
    FAIL() << "expected Error";
  } catch (const ConfigError&) {
    FAIL() << "a refused capture is a run-time Error (exit 1), not a ConfigError";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train.cuda_graph is true, but the training step cannot be captured"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("synchronises the host with the device"), std::string::npos) << what;
  }
  // No capture is left running and no allocator pool routed: a clean trainer captures and trains.
  c.run.name = "after";
  const RunResult after = train(c, "true", "after");
  EXPECT_EQ(after.cuda_graph, "captured");
  const RunResult eager = train(c, "false", "after_eager");
  expect_same_run(after, eager, 0.0);
}

// batch_norm_act inside a captured graph takes cuDNN's fused calls, and a replay computes what an
// eager call on the same inputs computes, bit for bit: y, every gradient and the running
// statistics. Fresh random inputs each replay, the outputs poisoned before it.
TEST(CudaGraphTest, BatchNormActsCudnnCallsReplayAsTheyRunEagerly) {
  SKIP_WITHOUT_CUDA();
  if (!detail::batch_norm_act_cudnn_built()) GTEST_SKIP() << "built without cuDNN";
  const c10::Device cuda(c10::kCUDA, 0);
  const auto opts = at::TensorOptions().device(cuda);
  const std::vector<int64_t> shape = {8, 64, 14, 14};
  const int64_t channels = shape[1];
  auto nhwc = [](const at::Tensor& t) {
    return t.to(at::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  };
  auto fresh_inputs = [&]() -> Batch {
    return {{"x", nhwc(at::randn(shape, opts) * 2 + 0.5)},
            {"residual", nhwc(at::randn(shape, opts))},
            {"dy", nhwc(at::randn(shape, opts))}};
  };
  const at::Tensor weight = at::rand({channels}, opts) + 0.5;
  const at::Tensor bias = at::randn({channels}, opts);
  // y, dx, dresidual, dweight, dbias, running mean, running variance.
  const char* names[] = {"y", "dx", "dresidual", "dweight", "dbias", "running_mean",
                         "running_var"};
  struct State {
    at::Tensor mean, var;
    std::vector<at::Tensor> out;
  };
  auto make_state = [&](const Batch& b) {
    State s{at::zeros({channels}, opts), at::ones({channels}, opts), {}};
    for (int i = 0; i < 3; ++i) s.out.push_back(at::empty_like(b.at("x")));  // y, dx, dresidual
    s.out.push_back(at::empty_like(weight));
    s.out.push_back(at::empty_like(bias));
    return s;
  };
  std::string path_in_step;
  auto step = [&](const Batch& b, State& s) {
    const at::Tensor x = b.at("x").detach().requires_grad_();
    const at::Tensor r = b.at("residual").detach().requires_grad_();
    const at::Tensor w = weight.detach().requires_grad_(), bi = bias.detach().requires_grad_();
    path_in_step = batch_norm_act_path(x, /*training=*/true);
    const at::Tensor y = batch_norm_act(x, r, w, bi, s.mean, s.var, true, 0.1, 1e-5, true);
    const std::vector<at::Tensor> g = torch::autograd::grad({y}, {x, r, w, bi}, {b.at("dy")});
    s.out[0].copy_(y);
    s.out[1].copy_(g[0]);
    s.out[2].copy_(g[1]);
    s.out[3].copy_(g[2]);
    s.out[4].copy_(g[3]);
  };
  const Batch first = fresh_inputs();
  State graphed = make_state(first), eager = make_state(first);
  StepGraph graph(cuda);
  graph.run_on_capture_stream([&] { step(first, graphed); });  // the warm-up before a capture
  const std::optional<std::string> failed =
      graph.capture({first}, [&](const std::vector<Batch>& b) { step(b[0], graphed); });
  ASSERT_FALSE(failed) << *failed;
  EXPECT_EQ(path_in_step, "cudnn") << "the captured step took the reference";

  for (int replay = 1; replay <= 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    const Batch b = fresh_inputs();
    const at::Tensor mean = at::randn({channels}, opts), var = at::rand({channels}, opts) + 0.5;
    for (State* s : {&graphed, &eager}) {
      s->mean.copy_(mean);
      s->var.copy_(var);
      for (at::Tensor& t : s->out) t.fill_(std::numeric_limits<float>::quiet_NaN());
    }
    graph.replay({b});
    step(b, eager);
    ASSERT_EQ(path_in_step, "cudnn");
    std::vector<at::Tensor> got = graphed.out, want = eager.out;
    got.insert(got.end(), {graphed.mean, graphed.var});
    want.insert(want.end(), {eager.mean, eager.var});
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(at::equal(got[i], want[i]))
          << names[i] << ": largest difference "
          << (got[i].to(at::kFloat) - want[i].to(at::kFloat)).abs().max().item<float>();
    }
  }
}

// uint8 tiny images for a ResNet, no evaluation.
class TinyImageTrainer : public Trainer {
 public:
  using Trainer::Trainer;

 protected:
  DatasetPtr build_train_dataset() override { return std::make_shared<TinyImageDataset>(); }
  DatasetPtr build_val_dataset() override { return nullptr; }
};

// The relative size of the difference between two runs' changes to their tensors (from the
// same start), all of them together.
double relative_difference(const std::vector<at::Tensor>& start, const std::vector<at::Tensor>& a,
                           const std::vector<at::Tensor>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const at::Tensor s = start[i].to(at::kDouble);
    diff += (a[i].to(at::kDouble) - b[i].to(at::kDouble)).pow(2).sum().item<double>();
    norm += (b[i].to(at::kDouble) - s).pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

std::vector<at::Tensor> float_buffers(Trainer& trainer) {
  std::vector<at::Tensor> out;
  for (const auto& t : trainer.model().buffers()) {
    if (t.is_floating_point()) out.push_back(t.detach().clone());
  }
  return out;
}

// A ResNet's norms go through batch_norm_act's cuDNN calls inside the captured step, and the
// graphed run trains as the eager run does: ResNet-18, bf16, channels-last, model.fused true.
// cuDNN's convolutions may sum in a different order run to run, so the runs are compared within
// bf16's reach, not bit for bit (the op itself is, above); the parameters' and running
// statistics' changes over the run, not their values, so that a step that changed nothing fails.
TEST(CudaGraphTest, AResNetWithFusedNormsGraphsAndTrainsAsInEagerMode) {
  SKIP_WITHOUT_CUDA();
  ExperimentConfig c = parse_config(R"(
run: {name: resnet, seed: 5, device: cuda}
model: {name: resnet18, stem: small, in_channels: 3, image_size: 12, num_classes: 3, fused: "true"}
data: {dataset: custom, batch_size: 16, num_workers: 0, shuffle: true, drop_last: true,
       mean: [0.5, 0.4, 0.3], std: [0.2, 0.25, 0.3]}
optim: {name: adamw, lr: 0.0001, fused: auto}
train: {max_steps: 8, precision: bf16, log_every: 1, eval_every: 0, checkpoint_every: 0,
        max_grad_norm: 1.0}
)");
  c.run.output_dir = temp_dir("graph_resnet");
  std::vector<RunResult> runs;
  std::vector<at::Tensor> start_weights, start_buffers;
  std::vector<std::vector<at::Tensor>> buffers;
  for (const char* mode : {"false", "true"}) {
    c.train.cuda_graph = mode;
    c.run.name = std::string("resnet_") + mode;
    TinyImageTrainer trainer(c);
    EXPECT_NE(trainer.plan().find("batch_norm_act cuDNN fused"), std::string::npos)
        << trainer.plan();
    start_weights = weights(trainer);  // the same in both runs (the seed)
    start_buffers = float_buffers(trainer);
    trainer.fit();
    runs.push_back({train_losses(trainer), weights(trainer),
                    summary_of(trainer).text.at("cuda_graph"), {}, {}});
    buffers.push_back(float_buffers(trainer));
  }
  const RunResult &eager = runs[0], &graphed = runs[1];
  EXPECT_EQ(graphed.cuda_graph, "captured");
  ASSERT_EQ(graphed.losses.size(), 8u);
  ASSERT_EQ(eager.losses.size(), 8u);
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    EXPECT_NEAR(graphed.losses[i], eager.losses[i], 0.03 * eager.losses[i] + 2e-3)
        << "step " << i + 1;
  }
  EXPECT_LT(eager.losses.back(), 0.5 * eager.losses.front()) << "the runs did not train";
  EXPECT_LT(relative_difference(start_weights, graphed.weights, eager.weights), 0.05);
  ASSERT_FALSE(start_buffers.empty());
  EXPECT_LT(relative_difference(start_buffers, buffers[1], buffers[0]), 0.05)
      << "running statistics";
}

}  // namespace
}  // namespace brrr
