// Trainer properties on CPU: accumulation equals a large batch, resume equals an uninterrupted run
// (also across an epoch boundary and with worker processes), train.deterministic applied at setup,
// bf16 autocast trains, a NaN loss stops the run naming the step, early stopping, EMA evaluation,
// checkpoints written, uint8 images normalised into the autocast dtype.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "core/config.h"
#include "core/determinism.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/ops/image_input.h"
#include "models/model.h"
#include "tests/test_fs.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/optim/optimizer.h"
#include "trainer/trainer.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

TEST(TrainerTest, AccumulationOfFourQuarterBatchesEqualsOneFullBatch) {
  const std::string dir = temp_dir("accum");
  ExperimentConfig big = base_config(dir);
  big.run.name = "big";
  big.data.batch_size = 32;
  big.train.max_steps = 3;
  ExperimentConfig small = big;
  small.run.name = "small";
  small.data.batch_size = 8;
  small.train.grad_accum_steps = 4;

  BlobTrainer a(big), b(small);
  a.fit();
  b.fit();
  const auto wa = weights(a), wb = weights(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    const double rel = (wa[i] - wb[i]).norm().item<double>() / wa[i].norm().item<double>();
    EXPECT_LT(rel, 1e-6) << "parameter " << i;
  }
  // And the weights did move: the comparison is not between two untouched models.
  BlobTrainer fresh(big);
  fresh.setup();
  EXPECT_GT((weights(fresh)[0] - wa[0]).abs().max().item<double>(), 1e-4);
}

void expect_resume_identical(ExperimentConfig config, int64_t interrupt_at, int64_t train_size) {
  ExperimentConfig straight_cfg = config;
  straight_cfg.run.name = "straight";
  BlobTrainer straight(straight_cfg, train_size);
  straight.fit();
  const auto expected = train_losses(straight);
  ASSERT_EQ(static_cast<int64_t>(expected.size()), config.train.max_steps);

  ExperimentConfig split_cfg = config;
  split_cfg.run.name = "split";
  {
    BlobTrainer first(split_cfg, train_size);
    first.stop_at = interrupt_at;
    first.fit();
    ASSERT_EQ(first.step(), interrupt_at);
  }
  BlobTrainer second(split_cfg, train_size);
  second.fit("auto");
  auto resumed = train_losses(second);
  ASSERT_EQ(static_cast<int64_t>(resumed.size()), config.train.max_steps - interrupt_at);
  for (size_t i = 0; i < resumed.size(); ++i) {
    // Bit for bit: the same floating-point operations in the same order.
    EXPECT_EQ(resumed[i], expected[static_cast<size_t>(interrupt_at) + i])
        << "step " << interrupt_at + 1 + i;
  }
  const auto w1 = weights(straight), w2 = weights(second);
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_TRUE(at::equal(w1[i], w2[i])) << "parameter " << i;
}

TEST(TrainerTest, ResumeReproducesTheUninterruptedRunBitForBit) {
  ExperimentConfig config = base_config(temp_dir("resume"));
  config.model.dropout = 0.2;  // exercises the CPU RNG state in the checkpoint
  config.train.max_steps = 8;
  expect_resume_identical(config, 4, 96);
}

TEST(TrainerTest, ResumeAcrossAnEpochBoundaryWithWorkers) {
  ExperimentConfig config = base_config(temp_dir("resume_epoch"));
  config.data.num_workers = 2;
  config.train.max_steps = 10;
  config.train.ema_decay = 0.9;
  // 48 examples / batch 16 = 3 batches per epoch: the interruption at step 5 is mid-epoch 1 and
  // the resumed run crosses into epochs 2 and 3.
  expect_resume_identical(config, 5, 48);
}

// train.deterministic is the process's setting from setup on, and a run without it turns it off
// again; on the CPU (deterministic already) the losses are the same either way.
TEST(TrainerTest, DeterministicIsAppliedAtSetupAndUndoneByTheNextRun) {
  ExperimentConfig config = base_config(temp_dir("deterministic"));
  config.train.max_steps = 4;
  config.train.deterministic = true;
  BlobTrainer on(config);
  EXPECT_NE(on.plan().find("precision   fp32; deterministic algorithms only"), std::string::npos)
      << on.plan();
  testing::internal::CaptureStderr();
  on.fit();
  const std::string on_log = testing::internal::GetCapturedStderr();
  EXPECT_NE(on_log.find("precision fp32, deterministic algorithms only"), std::string::npos)
      << on_log;
  EXPECT_TRUE(deterministic());
  config.train.deterministic = false;
  config.run.name = "off";
  BlobTrainer off(config);
  testing::internal::CaptureStderr();
  off.fit();
  const std::string off_log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(off_log.find("deterministic"), std::string::npos) << off_log;
  EXPECT_FALSE(deterministic());
  EXPECT_EQ(train_losses(on), train_losses(off));
}

TEST(TrainerTest, Bf16AutocastOnCpuTrains) {
  ExperimentConfig config = base_config(temp_dir("bf16"));
  config.train.precision = "bf16";
  config.train.max_steps = 30;
  config.optim.lr = 0.03;
  BlobTrainer trainer(config);
  trainer.fit();
  const auto losses = train_losses(trainer);
  ASSERT_EQ(losses.size(), 30u);
  EXPECT_LT(losses.back(), 0.6 * losses.front());
}

TEST(TrainerTest, NonFiniteLossStopsNamingTheStep) {
  ExperimentConfig config = base_config(temp_dir("nan"));
  config.train.log_every = 5;
  BlobTrainer trainer(config);
  trainer.poison_at_3 = true;
  try {
    trainer.fit();
    FAIL() << "expected a TrainingError";
  } catch (const TrainingError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("non-finite loss nan at step 3"), std::string::npos) << what;
    EXPECT_NE(what.find("last good checkpoint: none"), std::string::npos) << what;
  }
}

// 96 examples in batches of 16 = 6 batches an epoch; with accumulation 2 that is 3 steps an
// epoch, so 2 epochs are 6 steps, and the loader has started its third epoch by the end.
TEST(TrainerTest, MaxEpochsRunsWholeStepsOfThatManyEpochs) {
  ExperimentConfig config = base_config(temp_dir("epochs"));
  config.train.max_steps = 0;
  config.train.max_epochs = 2;
  config.train.grad_accum_steps = 2;
  BlobTrainer trainer(config);
  EXPECT_NE(trainer.plan().find("steps       6 = 2 epochs x 3 "), std::string::npos)
      << trainer.plan();
  trainer.fit();
  EXPECT_EQ(trainer.step(), 6);
  EXPECT_EQ(train_losses(trainer).size(), 6u);
  // The run directory's config is the one given (parse_config reads it back).
  const ExperimentConfig written =
      load_config((fs::path(trainer.run_dir()) / "config.yaml").string());
  EXPECT_EQ(written.train.max_epochs, 2);
  EXPECT_EQ(written.train.max_steps, 0);
}

// An evaluation between two logging windows is not training time: with an evaluation hook that
// takes 300 ms after every window, each window's rate still agrees with its own step time, and
// that step time is the steps' (a tiny MLP: far below the 300 ms). The summary's pin_memory is
// what the loader used (CPU: no pinned ring), not what the config asked for.
class SlowEvalTrainer : public BlobTrainer {
 public:
  using BlobTrainer::BlobTrainer;

 protected:
  void on_eval_end(int64_t /*step*/, const Metrics& /*metrics*/) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
};

TEST(TrainerTest, EvaluationTimeIsNotCountedInTheNextWindow) {
  ExperimentConfig config = base_config(temp_dir("slow_eval"));
  config.train.max_steps = 8;
  config.train.log_every = 2;
  config.train.eval_every = 2;
  ASSERT_TRUE(config.data.pin_memory);
  SlowEvalTrainer trainer(config);
  trainer.fit();
  int windows = 0;
  for (const auto& r : trainer.history()) {
    if (r.kind == RecordKind::kSummary) {
      EXPECT_EQ(r.values.at("pin_memory"), 0.0);
    }
    if (r.kind != RecordKind::kTrain) continue;
    ++windows;
    const double step_ms = r.values.at("step_time_ms");
    const double examples =
        r.values.at("samples_per_s") * step_ms / 1e3 * r.values.at("window_steps");
    EXPECT_NEAR(examples, 2 * 16, 1e-6) << "step " << r.step;
    EXPECT_LT(step_ms, 150.0) << "step " << r.step;
    EXPECT_EQ(r.values.count("tokens_per_s"), 0u) << "an image model counts no tokens";
  }
  EXPECT_EQ(windows, 4);
}

TEST(TrainerTest, EarlyStoppingStopsAfterPatienceEvaluations) {
  ExperimentConfig config = base_config(temp_dir("early"));
  config.optim.lr = 1e-9;  // nothing improves by min_delta after the first evaluation
  config.schedule.name = "constant";
  config.schedule.warmup_steps = 0;
  config.train.max_steps = 50;
  config.train.eval_every = 2;
  config.train.early_stopping.patience = 2;
  config.train.early_stopping.min_delta = 0.01;
  BlobTrainer trainer(config);
  trainer.fit();
  // Evaluations at steps 2 (best), 4 (bad 1), 6 (bad 2 -> stop).
  EXPECT_EQ(trainer.step(), 6);
}

// On the CPU there is no device memory to measure: data.batch_size: auto falls back to 64 and says
// so. data.num_workers: auto measures the real loader (forked workers included) against a real
// probe step and prints the choice with the measurements; the run then uses both.
TEST(TrainerTest, AutoTunersOnCpuChooseAndSayWhy) {
  ExperimentConfig c = base_config(temp_dir("auto"));
  c.data.batch_size = 0;
  c.data.num_workers = -1;
  c.train.max_steps = 3;
  BlobTrainer trainer(c, 640);
  testing::internal::CaptureStderr();
  trainer.fit();
  const std::string log = testing::internal::GetCapturedStderr();
  const int64_t workers = trainer.config().data.num_workers;
  EXPECT_EQ(trainer.config().data.batch_size, 64);
  EXPECT_GE(workers, 0);
  EXPECT_LE(workers, std::max<int64_t>(1, std::thread::hardware_concurrency()));
  EXPECT_NE(
      log.find("data.batch_size: auto needs a CUDA device to measure memory; using 64 on cpu"),
      std::string::npos)
      << log;
  EXPECT_NE(log.find("data.num_workers: auto -> " + std::to_string(workers) + " ("),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("measured batches/s by workers: 0:"), std::string::npos) << log;
  const brrr::MetricRecord& summary = trainer.history().back();
  ASSERT_EQ(summary.kind, brrr::RecordKind::kSummary);
  EXPECT_EQ(summary.values.at("batch_size"), 64.0);
  EXPECT_EQ(summary.values.at("num_workers"), static_cast<double>(workers));
}

TEST(TrainerTest, WritesConfigMetricsCheckpointsAndBest) {
  ExperimentConfig config = base_config(temp_dir("files"));
  config.train.eval_every = 3;
  config.train.checkpoint_every = 2;
  config.train.keep_checkpoints = 2;
  config.train.best_metric = "val_accuracy";
  config.train.best_mode = "max";
  BlobTrainer trainer(config);
  trainer.fit();
  const fs::path run = trainer.run_dir();
  EXPECT_TRUE(fs::exists(run / "config.yaml"));
  EXPECT_TRUE(fs::exists(run / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "best.pt"));
  int step_files = 0;
  for (const auto& e : fs::directory_iterator(run / "checkpoints")) {
    step_files += e.path().filename().string().rfind("step_", 0) == 0;
  }
  EXPECT_EQ(step_files, 2);  // steps 4 and 6 kept of 2, 4, 6
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000006.pt"));
  // The resolved config written to the run loads back to the same config.
  EXPECT_EQ(load_config((run / "config.yaml").string()), trainer.config());
  bool has_tfevents = false;
  for (const auto& e : fs::directory_iterator(run)) {
    has_tfevents |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(has_tfevents);
}

}  // namespace
}  // namespace brrr

namespace brrr {
namespace {

// A trainer whose validation_step records the weights it evaluates with.
class WeightSpyTrainer : public BlobTrainer {
 public:
  using BlobTrainer::BlobTrainer;
  std::vector<at::Tensor> evaluated;

 protected:
  StepOutput validation_step(const Batch& batch) override {
    if (evaluated.empty()) {
      for (const auto& p : model().parameters()) evaluated.push_back(p.detach().clone());
    }
    return BlobTrainer::validation_step(batch);
  }
};

TEST(TrainerTest, EmaWeightsAreTheOnesEvaluated) {
  ExperimentConfig config = base_config(temp_dir("ema_eval"));
  config.train.eval_every = 6;  // one evaluation, after the last step
  WeightSpyTrainer trainer(config);
  auto ema = std::make_shared<Ema>(0.5);
  trainer.add_callback(ema);
  trainer.fit();
  ASSERT_FALSE(trainer.evaluated.empty()) << "the run evaluated once at its end";
  ASSERT_EQ(trainer.evaluated.size(), ema->shadow().size());
  const std::vector<at::Tensor> live = weights(trainer);
  bool differs_from_live = false;
  for (size_t i = 0; i < live.size(); ++i) {
    EXPECT_TRUE(at::equal(trainer.evaluated[i], ema->shadow()[i])) << "parameter " << i;
    differs_from_live |= !at::equal(trainer.evaluated[i], live[i]);
  }
  EXPECT_TRUE(differs_from_live) << "with decay 0.5 the EMA differs from the live weights";
  // The live weights are back in place after the evaluation.
  trainer.evaluated.clear();
  trainer.evaluate();
  const std::vector<at::Tensor> after = weights(trainer);
  for (size_t i = 0; i < live.size(); ++i) EXPECT_TRUE(at::equal(after[i], live[i]));
}

TEST(TrainerCudaTest, NoHostSyncPerStepOutsideLogging) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExperimentConfig config = base_config(temp_dir("cuda_syncs"));
  config.run.device = "cuda";
  config.optim.fused = "auto";
  config.train.max_steps = 24;
  config.train.log_every = 8;
  config.train.precision = "bf16";
  BlobTrainer trainer(config);
  trainer.fit();
  const MetricRecord& summary = trainer.history().back();
  ASSERT_EQ(summary.kind, RecordKind::kSummary);
  EXPECT_EQ(summary.values.at("host_syncs_per_step"), 0.0);
  for (const auto& r : trainer.history()) {
    if (r.kind == RecordKind::kTrain) {
      EXPECT_EQ(r.values.at("host_syncs_per_step"), 0.0) << r.step;
    }
  }
}

// mem_peak_mib is the fit's own peak: 512 MiB allocated and freed before fit() (as a program's
// earlier work, or an earlier fit, would) do not show in it. What stays allocated when the fit
// begins does (here: cuBLAS's workspaces of the tests before, kept by the caching allocator for
// the process's life); the blob model and its batches add a few MiB.
TEST(TrainerCudaTest, PeakMemoryCountsFromTheStartOfTheFit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kEarlierMib = 512;
  ExperimentConfig config = base_config(temp_dir("cuda_peak"));
  config.run.device = "cuda";
  config.train.max_steps = 8;
  config.train.log_every = 4;
  for (int fit = 0; fit < 2; ++fit) {  // a second fit measures from its own start too
    detail::cuda_reset_peak_memory(0);
    const double allocated_mib = detail::cuda_peak_memory_mib(0);  // what is allocated now
    {
      const at::Tensor earlier =
          at::empty({kEarlierMib << 20}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
    }
    ASSERT_GE(detail::cuda_peak_memory_mib(0), allocated_mib + kEarlierMib);
    config.run.name = "fit" + std::to_string(fit);
    BlobTrainer trainer(config);
    trainer.fit();
    int records = 0;
    for (const auto& r : trainer.history()) {
      if (r.kind != RecordKind::kTrain && r.kind != RecordKind::kSummary) continue;
      const double peak = r.values.at("mem_peak_mib");
      EXPECT_GT(peak, 0.0) << "fit " << fit << " step " << r.step;
      EXPECT_LT(peak, allocated_mib + kEarlierMib) << "fit " << fit << " step " << r.step;
      ++records;
    }
    EXPECT_EQ(records, 3) << "two train records and the summary";
  }
}

}  // namespace
}  // namespace brrr

namespace brrr {
namespace {

// Windows of a fixed pseudo-random token stream with some structure to learn (each token is the
// previous plus a small step), 33 tokens each (block 32).
class TokenStreamDataset : public Dataset {
 public:
  explicit TokenStreamDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index, Rng& /*rng*/) const override {
    std::vector<int64_t> t(33);
    int64_t v = (index * 7919) % 256;
    for (auto& x : t) {
      x = v;
      v = (v + 1 + (v * 31 + index) % 3) % 256;
    }
    return {{"tokens", at::tensor(t, at::kLong)}};
  }
  std::string describe() const override { return "token stream"; }

 private:
  int64_t n_;
};

class TokenTrainer : public Trainer {
 public:
  using Trainer::Trainer;

 protected:
  DatasetPtr build_train_dataset() override { return std::make_shared<TokenStreamDataset>(512); }
  DatasetPtr build_val_dataset() override { return nullptr; }
};

ExperimentConfig gpt_config(const std::string& dir, const std::string& device, int64_t steps) {
  ExperimentConfig c = parse_config(R"(
run: {name: gpt, seed: 5, device: cpu}
model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 64, block_size: 32, vocab_size: 256}
data: {dataset: custom, batch_size: 8, num_workers: 0}
optim: {name: adamw, lr: 3.0e-3, weight_decay: 0.1, betas: [0.9, 0.95]}
schedule: {name: cosine, warmup_steps: 10}
train: {max_steps: 20, log_every: 10, max_grad_norm: 1.0}
)");
  c.run.output_dir = dir;
  c.run.device = device;
  c.train.max_steps = steps;
  return c;
}

std::vector<double> gpt_losses(ExperimentConfig config, const std::string& fused,
                               const std::string& name) {
  config.model.fused = fused;
  config.run.name = name;
  TokenTrainer trainer(config);
  trainer.fit();
  return train_losses(trainer);
}

// --dry-run's ops line names each fused op of the GPT and the path it takes (the ATen references
// on the CPU), and the unfused composition with model.fused: false.
TEST(TrainerTest, PlanNamesTheOpsPathOfTheGpt) {
  ExperimentConfig c = gpt_config(temp_dir("gpt_plan"), "cpu", 20);
  c.model.fused = "auto";
  TokenTrainer fused(c);
  const std::string fused_plan = fused.plan();
  EXPECT_NE(fused_plan.find("ops         residual_layernorm ATen reference, linear_bias ATen "
                            "reference, bias_gelu ATen reference, lm_head_loss ATen reference, "
                            "attention "),
            std::string::npos)
      << fused_plan;
  c.model.fused = "false";
  TokenTrainer plain(c);
  const std::string plain_plan = plain.plan();
  EXPECT_NE(plain_plan.find("ops         classifier unfused ATen, attention "), std::string::npos)
      << plain_plan;
}

// The fused path trains the same model as the unfused one: on the CPU (ATen references of the
// fused ops) the losses agree to float32 rounding.
TEST(TrainerTest, FusedGptTrainsLikeTheUnfusedPathOnCpu) {
  const std::string dir = temp_dir("fused_cpu");
  const ExperimentConfig c = gpt_config(dir, "cpu", 20);
  const auto fused = gpt_losses(c, "auto", "fused");
  const auto plain = gpt_losses(c, "false", "plain");
  ASSERT_EQ(fused.size(), 2u);
  ASSERT_EQ(plain.size(), 2u);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], plain[i], 1e-4 * plain[i]);
}

// Records the dtype of every prepared image batch; with float_input, prepares them as before the
// images went straight into the autocast dtype (float32, which autocast casts at the first conv).
class ImageTrainer : public Trainer {
 public:
  using Trainer::Trainer;
  bool float_input = false;
  std::vector<at::ScalarType> input_dtypes;

 protected:
  DatasetPtr build_train_dataset() override { return std::make_shared<TinyImageDataset>(); }
  DatasetPtr build_val_dataset() override { return nullptr; }
  Batch prepare_batch(Batch batch) override {
    if (float_input) {
      const ImageNormalizer normalize(config().data.mean, config().data.std);
      batch.at("image") = normalize(batch.at("image"), at::kFloat);
    } else {
      batch = Trainer::prepare_batch(std::move(batch));
    }
    input_dtypes.push_back(batch.at("image").scalar_type());
    return batch;
  }
};

ExperimentConfig image_config(const std::string& dir, const std::string& precision) {
  ExperimentConfig c = parse_config(R"(
run: {name: images, seed: 3, device: cpu}
model: {name: convnet, in_channels: 3, image_size: 12, num_classes: 3, channels: [4, 8]}
data: {dataset: custom, batch_size: 16, num_workers: 0, mean: [0.5, 0.4, 0.3], std: [0.2, 0.25, 0.3]}
optim: {name: adamw, lr: 0.01}
train: {max_steps: 8, log_every: 1, eval_every: 0, checkpoint_every: 0, max_grad_norm: 1.0}
)");
  c.run.output_dir = dir;
  c.train.precision = precision;
  return c;
}

// --dry-run's ops line for a ResNet: batch_norm_act's path (its ATen reference on the CPU) after
// image_input, and no batch_norm_act with model.fused: false.
TEST(TrainerTest, PlanNamesTheBatchNormPathOfAResNet) {
  ExperimentConfig c = image_config(temp_dir("resnet_plan"), "bf16");
  c.model.name = "resnet18";
  c.model.stem = "small";
  c.model.image_size = 32;
  ImageTrainer fused(c);
  EXPECT_NE(fused.plan().find("ops         image_input ATen reference (uint8 -> BFloat16), "
                              "batch_norm_act ATen reference\n"),
            std::string::npos)
      << fused.plan();
  c.model.fused = "false";
  ImageTrainer plain(c);
  EXPECT_NE(plain.plan().find("ops         image_input ATen reference (uint8 -> BFloat16)\n"),
            std::string::npos)
      << plain.plan();
}

// uint8 images are normalised into the autocast dtype (bf16 under train.precision bf16, float32
// under fp32), and a bf16 run so fed trains exactly as one fed float32 images that autocast casts.
TEST(TrainerTest, ImagesAreNormalisedIntoTheAutocastDtypeAndTrainAsFloatImagesCastByAutocast) {
  const std::string dir = temp_dir("image_dtype");
  ImageTrainer fp32(image_config(dir, "fp32"));
  fp32.fit();
  ASSERT_FALSE(fp32.input_dtypes.empty());
  for (const at::ScalarType t : fp32.input_dtypes) EXPECT_EQ(t, at::kFloat);
  EXPECT_NE(fp32.plan().find("image_input ATen reference (uint8 -> Float)"), std::string::npos)
      << fp32.plan();

  ExperimentConfig c = image_config(dir, "bf16");
  c.run.name = "bf16";
  ImageTrainer bf16(c);
  bf16.fit();
  ASSERT_EQ(bf16.input_dtypes.size(), 8u);
  for (const at::ScalarType t : bf16.input_dtypes) EXPECT_EQ(t, at::kBFloat16);
  EXPECT_NE(bf16.plan().find("image_input ATen reference (uint8 -> BFloat16)"), std::string::npos)
      << bf16.plan();

  c.run.name = "bf16_float_input";
  ImageTrainer cast(c);
  cast.float_input = true;
  cast.fit();
  for (const at::ScalarType t : cast.input_dtypes) EXPECT_EQ(t, at::kFloat);
  const std::vector<double> a = train_losses(bf16), b = train_losses(cast);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  const auto wa = weights(bf16), wb = weights(cast);
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(at::equal(wa[i], wb[i])) << "parameter " << i;
}

// On the GPU, 200 bf16 steps through the fused kernels stay within 1% of the unfused ATen path at
// every logged step.
TEST(TrainerCudaTest, FusedGptTrainsLikeTheUnfusedPathFor200Steps) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExperimentConfig c = gpt_config(temp_dir("fused_cuda"), "cuda", 200);
  c.train.precision = "bf16";
  const auto fused = gpt_losses(c, "auto", "fused");
  const auto plain = gpt_losses(c, "false", "plain");
  ASSERT_EQ(fused.size(), 20u);
  ASSERT_EQ(plain.size(), 20u);
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_NEAR(fused[i], plain[i], 0.01 * plain[i]) << "logged step " << (i + 1) * 10;
  }
  EXPECT_LT(fused.back(), 0.5 * fused.front()) << "it learned";
}

}  // namespace
}  // namespace brrr
