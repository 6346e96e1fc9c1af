// Faults a run must survive without losing or mixing anything, reproduced for real in process: a
// corrupt newest checkpoint, no valid checkpoint at all, a full disk while checkpointing, a stop
// request while the loader is stuck on a worker, a second trainer on a locked run directory, a
// fresh start over a finished run, a resume that would overwrite a later lineage, a resume with
// another batch size, and data that holds more classes than the model has outputs.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/checkpoint_io.h"
#include "core/error.h"
#include "core/run_dir_lock.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/signals.h"

namespace brrr {
namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Flips 64 bytes in the middle of the file's largest stretch of tensor data: the last entry of
// a checkpoint's zip is small metadata, the bulk before it is tensors.
void corrupt(const fs::path& path) {
  std::string bytes = read_bytes(path);
  const size_t middle = bytes.size() / 3;
  for (size_t i = 0; i < 64; ++i) bytes[middle + i] ^= 0x5a;
  write_bytes(path, bytes);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

ExperimentConfig checkpointing_config(const std::string& dir) {
  ExperimentConfig c = base_config(dir);
  c.model.hidden_sizes = {256};  // tensors dominate the checkpoint file
  c.train.checkpoint_every = 2;
  c.train.keep_checkpoints = 5;
  c.train.max_steps = 6;
  return c;
}

std::string step_file(const std::string& dir, const std::string& name, int64_t step) {
  return (fs::path(dir) / name / "checkpoints" / fmt::format("step_{:08d}.pt", step)).string();
}

TEST(TrainerFaultsTest, ResumeAutoSkipsACorruptCheckpointForThePreviousValidOne) {
  const std::string dir = temp_dir("corrupt");
  ExperimentConfig config = checkpointing_config(dir);
  BlobTrainer(config).fit();
  const std::string newest = step_file(dir, "blobs", 6);
  corrupt(newest);
  config.train.max_steps = 8;
  BlobTrainer resumed(config);
  testing::internal::CaptureStderr();
  resumed.fit("auto");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(newest), std::string::npos) << err;
  EXPECT_NE(err.find("corrupt"), std::string::npos) << err;
  EXPECT_NE(err.find("resumed from " + step_file(dir, "blobs", 4)), std::string::npos) << err;
  EXPECT_EQ(resumed.step(), 8);
  // The corrupt file was replaced by the resumed run's own step 6.
  EXPECT_EQ(verify_checkpoint_checksum(newest), ChecksumStatus::kVerified);

  // --resume PATH of a corrupt file is an error naming it.
  corrupt(step_file(dir, "blobs", 8));
  BlobTrainer explicit_path(config);
  const std::string what = message_of([&] { explicit_path.fit(step_file(dir, "blobs", 8)); });
  EXPECT_NE(what.find(step_file(dir, "blobs", 8)), std::string::npos) << what;
  EXPECT_NE(what.find("corrupt"), std::string::npos) << what;
}

TEST(TrainerFaultsTest, ResumeAutoWithNoValidCheckpointIsAnErrorNotAFreshStart) {
  const std::string dir = temp_dir("none_valid");
  ExperimentConfig config = checkpointing_config(dir);
  BlobTrainer(config).fit();
  for (int64_t step : {2, 4, 6}) corrupt(step_file(dir, "blobs", step));
  BlobTrainer resumed(config);
  testing::internal::CaptureStderr();
  const std::string what = message_of([&] { resumed.fit("auto"); });
  testing::internal::GetCapturedStderr();
  EXPECT_NE(what.find("none of the 3 checkpoints"), std::string::npos) << what;
  EXPECT_EQ(resumed.step(), 0);

  // A run that never wrote a checkpoint starts afresh under --resume auto, and says so.
  ExperimentConfig fresh = base_config(dir);
  fresh.run.name = "never_saved";
  BlobTrainer first(fresh);
  testing::internal::CaptureStderr();
  first.fit("auto");
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("starting afresh"), std::string::npos) << log;
  EXPECT_EQ(first.step(), 6);
}

TEST(TrainerFaultsTest, AFullDiskWhileCheckpointingIsACleanErrorAndResumeWorks) {
  const std::string dir = temp_dir("disk_full");
  ExperimentConfig config = checkpointing_config(dir);
  // The save at step 4 writes through a link to /dev/full: ENOSPC from the kernel.
  const fs::path checkpoints = fs::path(dir) / "blobs" / "checkpoints";
  fs::create_directories(checkpoints);
  const fs::path tmp = fmt::format("{}.tmp.{}", step_file(dir, "blobs", 4), getpid());
  fs::create_symlink("/dev/full", tmp);
  BlobTrainer trainer(config);
  const std::string what = message_of([&] { trainer.fit(); });
  EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
  EXPECT_NE(what.find(step_file(dir, "blobs", 4)), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp))) << "the partial file was left behind";
  EXPECT_FALSE(fs::exists(step_file(dir, "blobs", 4)));
  EXPECT_EQ(verify_checkpoint_checksum(step_file(dir, "blobs", 2)), ChecksumStatus::kVerified);
  // The metrics of steps 1..4 reached the disk before the error.
  const std::string metrics = read_bytes(fs::path(dir) / "blobs" / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"step\": 4"), std::string::npos) << metrics;

  BlobTrainer resumed(config);
  testing::internal::CaptureStderr();
  resumed.fit("auto");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("resumed from " + step_file(dir, "blobs", 2)), std::string::npos) << err;
  EXPECT_EQ(resumed.step(), 6);
}

// Blobs whose sample `stuck_index` never finishes loading while `gate` exists: the worker that
// loads it hangs as a stopped or wedged worker would, after creating `gate`.reached.
class GatedBlobDataset : public BlobDataset {
 public:
  GatedBlobDataset(int64_t n, std::string gate, int64_t stuck_index)
      : BlobDataset(n), gate_(std::move(gate)), stuck_index_(stuck_index) {}
  Sample get(int64_t index, Rng& rng) const override {
    if (index == stuck_index_ && fs::exists(gate_)) std::ofstream(gate_ + ".reached") << "stuck";
    while (index == stuck_index_ && fs::exists(gate_)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return BlobDataset::get(index, rng);
  }

 private:
  std::string gate_;
  int64_t stuck_index_;
};

class GatedTrainer : public BlobTrainer {
 public:
  GatedTrainer(ExperimentConfig config, std::string gate)
      : BlobTrainer(std::move(config)), gate_(std::move(gate)) {}

 protected:
  DatasetPtr build_train_dataset() override {
    return std::make_shared<GatedBlobDataset>(96, gate_, 56);
  }

 private:
  std::string gate_;
};

TEST(TrainerFaultsTest, AStopWhileTheLoaderIsStuckCheckpointsTheLastStepAndResumesExactly) {
  const std::string dir = temp_dir("stuck");
  ExperimentConfig config = base_config(dir);
  config.model.dropout = 0.2;   // the RNG must be put back to the step's start
  config.data.shuffle = false;  // batch b holds samples [8b, 8b + 8)
  config.data.batch_size = 8;
  config.data.num_workers = 2;
  config.train.grad_accum_steps = 2;
  config.train.max_steps = 6;
  config.data.stall_warning_s = 0.5;

  ExperimentConfig straight_cfg = config;
  straight_cfg.run.name = "straight";
  GatedTrainer straight(straight_cfg, (fs::path(dir) / "no_gate").string());
  straight.fit();
  const auto expected = train_losses(straight);

  // Sample 56 is in batch 7, the second micro-batch of step 4: the stop lands inside a step,
  // after its first micro-batch's forward and backward.
  const fs::path gate = fs::path(dir) / "gate";
  std::ofstream(gate) << "closed";
  ExperimentConfig split_cfg = config;
  split_cfg.run.name = "split";
  GatedTrainer first(split_cfg, gate.string());
  std::chrono::steady_clock::time_point signalled;
  std::thread stopper([&] {
    // Once the worker is stuck, and the loader has waited past its 0.5 s stall warning.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(gate.string() + ".reached") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    signalled = std::chrono::steady_clock::now();
    kill(getpid(), SIGTERM);
  });
  testing::internal::CaptureStderr();
  first.fit();
  const auto returned = std::chrono::steady_clock::now();
  const std::string err = testing::internal::GetCapturedStderr();
  stopper.join();
  StopSignalGuard::reset();
  EXPECT_LT(std::chrono::duration<double>(returned - signalled).count(), 5.0);
  EXPECT_EQ(first.step(), 3);
  EXPECT_NE(err.find("waited"), std::string::npos) << err;
  EXPECT_NE(err.find("batch 7 of epoch 0 from worker 1"), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(step_file(dir, "split", 3))) << err;

  fs::remove(gate);
  GatedTrainer second(split_cfg, gate.string());
  second.fit("auto");
  const auto resumed = train_losses(second);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i], expected[3 + i]) << "step " << 4 + i;
  }
  const auto w1 = weights(straight), w2 = weights(second);
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_TRUE(at::equal(w1[i], w2[i])) << "parameter " << i;
}

TEST(TrainerFaultsTest, ASecondTrainerOnALockedRunDirectoryIsRefusedNamingThePid) {
  const std::string dir = temp_dir("locked");
  ExperimentConfig config = base_config(dir);
  const RunDirLock held((fs::path(dir) / "blobs").string());
  BlobTrainer second(config);
  try {
    second.fit("auto");
    ADD_FAILURE() << "a second trainer ran on a locked run directory";
  } catch (const RunDirError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("pid {}", getpid())), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(fs::path(dir) / "blobs" / "metrics.jsonl"));
}

TEST(TrainerFaultsTest, StartingAfreshOverAFinishedRunIsRefusedUnlessOverwrite) {
  const std::string dir = temp_dir("rerun");
  ExperimentConfig config = checkpointing_config(dir);
  BlobTrainer(config).fit();
  const std::string best_before = read_bytes(step_file(dir, "blobs", 6));
  const std::string metrics_before = read_bytes(fs::path(dir) / "blobs" / "metrics.jsonl");
  BlobTrainer again(config);
  const std::string what = message_of([&] { again.fit(); });
  EXPECT_NE(what.find("already holds a run"), std::string::npos) << what;
  EXPECT_NE(what.find("--resume auto"), std::string::npos) << what;
  EXPECT_EQ(read_bytes(step_file(dir, "blobs", 6)), best_before);
  EXPECT_EQ(read_bytes(fs::path(dir) / "blobs" / "metrics.jsonl"), metrics_before);

  // run.overwrite replaces the earlier run: nothing of it is left to mix with the new one.
  config.run.overwrite = true;
  config.train.max_steps = 4;
  BlobTrainer replaced(config);
  replaced.fit();
  EXPECT_FALSE(fs::exists(step_file(dir, "blobs", 6)));
  const std::string metrics = read_bytes(fs::path(dir) / "blobs" / "metrics.jsonl");
  EXPECT_EQ(metrics.find("\"step\": 6"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"step\": 4"), std::string::npos) << metrics;
}

TEST(TrainerFaultsTest, ResumingFromAnOlderCheckpointDoesNotOverwriteTheLaterOnes) {
  const std::string dir = temp_dir("lineage");
  ExperimentConfig config = checkpointing_config(dir);
  BlobTrainer(config).fit();
  const std::string later = read_bytes(step_file(dir, "blobs", 6));
  BlobTrainer from_two(config);
  const std::string what = message_of([&] { from_two.fit(step_file(dir, "blobs", 2)); });
  EXPECT_NE(what.find("up to step 6"), std::string::npos) << what;
  EXPECT_EQ(read_bytes(step_file(dir, "blobs", 6)), later);
}

TEST(TrainerFaultsTest, ResumeWithAnotherBatchSizeWarnsOrWithStrictResumeRefuses) {
  const std::string dir = temp_dir("batch_change");
  ExperimentConfig config = checkpointing_config(dir);
  config.train.max_steps = 4;
  BlobTrainer(config).fit();
  config.train.max_steps = 6;
  config.data.batch_size = 32;
  ExperimentConfig strict = config;
  strict.run.strict_resume = true;
  BlobTrainer refused(strict);
  const std::string what = message_of([&] { refused.fit("auto"); });
  EXPECT_NE(what.find("data.batch_size"), std::string::npos) << what;
  EXPECT_NE(what.find("batch size 16"), std::string::npos) << what;

  BlobTrainer resumed(config);
  testing::internal::CaptureStderr();
  resumed.fit("auto");
  const std::string err = testing::internal::GetCapturedStderr();
  // 4 steps of 16 = 64 examples into the epoch = batch 2 of 32, exactly.
  EXPECT_NE(err.find("becomes batch 2"), std::string::npos) << err;
  EXPECT_EQ(err.find("approximate"), std::string::npos) << err;
  EXPECT_NE(err.find("the first logging window averages 1 step"), std::string::npos) << err;
  EXPECT_EQ(resumed.step(), 6);
}

class LabelledBlobs : public BlobDataset {
 public:
  using BlobDataset::BlobDataset;
  std::optional<int64_t> max_target_id() const override { return 2; }
};

class LabelledTrainer : public BlobTrainer {
 public:
  using BlobTrainer::BlobTrainer;

 protected:
  DatasetPtr build_train_dataset() override { return std::make_shared<LabelledBlobs>(96); }
};

class KeyedErrorTrainer : public BlobTrainer {
 public:
  using BlobTrainer::BlobTrainer;

 protected:
  DatasetPtr build_train_dataset() override {
    throw ConfigError("data.transforms[0].size",
                      "random_crop 32x32 is larger than the 28x28 image");
  }
};

TEST(TrainerFaultsTest, ADatasetsKeyedConfigErrorGetsTheKeysPlace) {
  ExperimentConfig config = parse_config(R"(
run: {name: blobs, seed: 11, device: cpu}
model: {name: mlp, in_channels: 8, image_size: 1, num_classes: 3, hidden_sizes: [16]}
data: {dataset: custom, batch_size: 16, transforms: [{name: random_crop, size: 32}]}
)",
                                         "exp.yaml");
  config.run.output_dir = temp_dir("keyed");
  KeyedErrorTrainer trainer(config);
  const std::string what = message_of([&] { trainer.setup(); });
  EXPECT_NE(what.find("data.transforms[0].size at exp.yaml:4:"), std::string::npos) << what;
  EXPECT_NE(what.find("larger than the 28x28 image"), std::string::npos) << what;
}

TEST(TrainerFaultsTest, FewerClassesThanTheDataHoldsIsAConfigErrorNamingTheKey) {
  ExperimentConfig config = parse_config(R"(
run: {name: blobs, seed: 11, device: cpu}
model: {name: mlp, in_channels: 8, image_size: 1, num_classes: 2, hidden_sizes: [16]}
data: {dataset: custom, batch_size: 16, num_workers: 0}
train: {max_steps: 2}
)",
                                         "exp.yaml");
  config.run.output_dir = temp_dir("classes");
  LabelledTrainer trainer(config);
  try {
    trainer.setup();
    ADD_FAILURE() << "num_classes 2 accepted for labels up to 2";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.num_classes at exp.yaml:3:"), std::string::npos) << what;
    EXPECT_NE(what.find("class id 2"), std::string::npos) << what;
    EXPECT_NE(what.find("at least 3"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace brrr
