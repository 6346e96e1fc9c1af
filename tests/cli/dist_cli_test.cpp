// Data-parallel training as a user starts it: `trainer --nproc-per-node N` with Gloo ranks on
// CPU. N ranks x batch B must train exactly like 1 rank x batch N B (the same examples reach
// each step, the gradients are averaged), checkpoints move between world sizes, a dead rank ends
// the job naming it, a signal stops every rank after the same step with one checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>

#include <torch/cuda.h>

#include "core/json_lines.h"
#include "models/weights_file.h"
#include "tests/cli/cli_test_util.h"
#include "trainer/dist/process_group.h"

namespace brrr {
namespace {

// The CPU tests run Gloo ranks.
#define BRRR_NEED_GLOO() \
  if (!gloo_available()) GTEST_SKIP() << "built without Gloo's headers (libgloo-dev)"

class DistCliTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    write_csv_experiment(12);
  }

  // Metric `key` of every record of kind `kind` of run `name`, by step.
  std::map<int64_t, double> series(const std::string& name, const std::string& kind = "train",
                                   const std::string& key = "loss") {
    std::map<int64_t, double> out;
    for (const auto& r : read_json_lines((dir_ / "runs" / name / "metrics.jsonl").string())) {
      if (r.strings.count("kind") && r.strings.at("kind") == kind) {
        out[static_cast<int64_t>(r.numbers.at("step"))] = r.numbers.at(key);
      }
    }
    return out;
  }
  std::map<int64_t, double> losses(const std::string& name) { return series(name); }

  // The weights of run `name`'s newest checkpoint (trainer export).
  TensorMap weights(const std::string& name) {
    const fs::path file = dir_ / (name + ".safetensors");
    const Result r = run({"export", "runs/" + name, "--out", file.string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_weights_file(file.string());
  }

  Result train(int64_t nproc, const std::string& name, std::vector<std::string> sets) {
    std::vector<std::string> args = {"--config", "exp.yaml", "--set", "run.name=" + name};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    if (nproc > 0) {
      args.push_back("--nproc-per-node");
      args.push_back(std::to_string(nproc));
    }
    return run(args);
  }

  // `sets` and one more --set.
  static std::vector<std::string> plus(std::vector<std::string> sets, const std::string& more) {
    sets.push_back(more);
    return sets;
  }

  static void expect_close(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b,
                           double tolerance, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const auto& [step, loss] : a) {
      ASSERT_TRUE(b.count(step)) << what << ": no step " << step;
      EXPECT_NEAR(loss, b.at(step), tolerance * std::max(1.0, std::abs(loss)))
          << what << " at step " << step;
    }
  }

  static void expect_same_weights(const TensorMap& a, const TensorMap& b, double tolerance) {
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, tensor] : a) {
      ASSERT_TRUE(b.count(name)) << name;
      const double diff = (tensor - b.at(name)).abs().max().item<double>();
      EXPECT_LE(diff, tolerance) << name;
    }
  }

  // Running (a zombie is not: it has ended, and only waits for a parent to reap it).
  static bool alive(pid_t pid) {
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z' &&
           stat[close + 2] != 'X';
  }

  // The rank process whose environment holds RANK=`rank`, among `launcher`'s children.
  static pid_t rank_pid(pid_t launcher, int rank) {
    const std::string wanted = "RANK=" + std::to_string(rank);
    for (pid_t child : children_of(launcher)) {
      std::ifstream in("/proc/" + std::to_string(child) + "/environ");
      for (std::string var; std::getline(in, var, '\0');) {
        if (var == wanted) return child;
      }
    }
    return -1;
  }

  // Whether a line of `text` starts with `prefix` and contains `needle`.
  static bool has_line(const std::string& text, const std::string& prefix,
                       const std::string& needle) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0 && line.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  // Waits until run `name` has logged a train record (the ranks are past setup).
  bool wait_for_training(const std::string& name, double limit_s = 120) {
    const fs::path metrics = dir_ / "runs" / name / "metrics.jsonl";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    while (std::chrono::steady_clock::now() < deadline) {
      if (slurp(metrics).find("\"kind\": \"train\"") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
};

TEST_F(DistCliTest, TwoRanksEqualOneRankWithTwiceTheBatch) {
  BRRR_NEED_GLOO();
  // 512 examples: 16 steps per epoch either way; 18 steps cross an epoch boundary. Clipping on
  // (its norm is over the all-reduced gradients), momentum SGD.
  // Evaluation every 9 steps on a validation set that 2 ranks shard (256 examples each).
  const std::vector<std::string> common = {"train.max_steps=18", "train.max_grad_norm=0.5",
                                           "data.val.dataset=csv", "data.val.path=train.csv",
                                           "train.eval_every=9"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), common.begin(), common.end());
    return more;
  };
  const Result one = train(0, "one", with({"data.batch_size=32"}));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const Result two = train(2, "two", with({"data.batch_size=16"}));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.err.find("[rank 0] "), std::string::npos) << two.err;
  EXPECT_NE(two.err.find("data-parallel on 2 ranks: 32 examples per step"), std::string::npos)
      << two.err;
  // 2 ranks x 2 micro-batches of 8 (the all-reduce only after the second).
  const Result accum = train(2, "accum", with({"data.batch_size=8", "train.grad_accum_steps=2"}));
  ASSERT_EQ(accum.exit_code, 0) << accum.err;

  const auto reference = losses("one");
  ASSERT_EQ(reference.size(), 18u);
  expect_close(losses("two"), reference, 1e-6, "2 ranks x 16");
  expect_close(losses("accum"), reference, 1e-6, "2 ranks x 2 x 8");
  for (const char* metric : {"val_loss", "val_accuracy"}) {
    const auto evals = series("one", "eval", metric);
    ASSERT_EQ(evals.size(), 2u) << metric;
    expect_close(series("two", "eval", metric), evals, 1e-6, metric);
    expect_close(series("accum", "eval", metric), evals, 1e-6, metric);
  }
  const TensorMap w1 = weights("one");
  expect_same_weights(weights("two"), w1, 1e-6);
  expect_same_weights(weights("accum"), w1, 1e-6);
  // c10d's timings of backward: compute, communication and their overlap, in every record
  // after the first step (whose times the second step's forward reads).
  int64_t timed = 0;
  for (const auto& r : read_json_lines((dir_ / "runs" / "two" / "metrics.jsonl").string())) {
    if (r.strings.at("kind") != "train" || r.numbers.at("step") < 2) continue;
    EXPECT_GT(r.numbers.count("comm_ms/backward_comm"), 0u) << "step " << r.numbers.at("step");
    if (r.numbers.count("comm_ms/backward_comm") == 0) continue;
    EXPECT_GT(r.numbers.at("comm_ms/backward_comm"), 0);
    EXPECT_GT(r.numbers.at("comm_ms/backward_compute"), 0);
    ++timed;
  }
  EXPECT_EQ(timed, 17);
  EXPECT_EQ(slurp(dir_ / "runs" / "one" / "metrics.jsonl").find("comm_ms"), std::string::npos);
  // Rank 1 wrote nothing of its own: one run directory, one metrics file.
  EXPECT_EQ(slurp(dir_ / "runs" / "two" / "metrics.jsonl").find("\"rank\""), std::string::npos);
}

TEST_F(DistCliTest, ThreeRanksOnAnEpochThatDoesNotDivideEvenly) {
  BRRR_NEED_GLOO();
  // 512 examples, 30 per step: 17 steps per epoch (2 examples dropped) on 1 rank, and 170 per
  // rank = 17 batches of 10 on 3 ranks. 20 steps run into the second epoch.
  const std::vector<std::string> common = {"train.max_steps=20", "data.drop_last=true"};
  const Result one = train(0, "one", plus(common, "data.batch_size=30"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const Result three = train(3, "three", plus(common, "data.batch_size=10"));
  ASSERT_EQ(three.exit_code, 0) << three.err;
  expect_close(losses("three"), losses("one"), 1e-6, "3 ranks x 10");
  expect_same_weights(weights("three"), weights("one"), 1e-6);
}

TEST_F(DistCliTest, EarlyStoppingEndsEveryRankAtTheStepOneProcessEnds) {
  BRRR_NEED_GLOO();
  // No evaluation improves val_loss by 100: patience 1 stops the run at the second one (step 6).
  const std::vector<std::string> common = {"train.max_steps=30",
                                           "data.val.dataset=csv",
                                           "data.val.path=train.csv",
                                           "train.eval_every=3",
                                           "train.early_stopping.patience=1",
                                           "train.early_stopping.min_delta=100"};
  const Result one = train(0, "one", plus(common, "data.batch_size=32"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const Result two = train(2, "two", plus(common, "data.batch_size=16"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const auto reference = losses("one");
  ASSERT_FALSE(reference.empty());
  EXPECT_LT(reference.rbegin()->first, 30) << "early stopping did not stop the 1-process run";
  expect_close(losses("two"), reference, 1e-6, "2 ranks with early stopping");
}

TEST_F(DistCliTest, ACheckpointOfTwoRanksResumesOnTwoAndOnOne) {
  BRRR_NEED_GLOO();
  const Result full =
      train(2, "full", {"data.batch_size=16", "train.max_steps=12", "train.checkpoint_every=6"});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::string at6 = (dir_ / "runs" / "full" / "checkpoints" / "step_00000006.pt").string();
  ASSERT_TRUE(fs::exists(at6)) << at6;
  const auto reference = losses("full");

  Result two = run({"--config", "exp.yaml", "--set", "run.name=two", "--set", "data.batch_size=16",
                    "--set", "train.max_steps=12", "--resume", at6, "--nproc-per-node", "2"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  Result one = run({"--config", "exp.yaml", "--set", "run.name=one", "--set", "data.batch_size=32",
                    "--set", "train.max_steps=12", "--resume", at6});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.err.find("batch size 16 on 2 rank(s), this run uses 32 on 1"), std::string::npos)
      << one.err;

  std::map<int64_t, double> tail;
  for (const auto& [step, loss] : reference) {
    if (step > 6) tail[step] = loss;
  }
  expect_close(losses("two"), tail, 1e-6, "2-rank resume");
  expect_close(losses("one"), tail, 1e-6, "1-rank resume");
  expect_same_weights(weights("two"), weights("full"), 1e-6);
  expect_same_weights(weights("one"), weights("full"), 1e-6);
}

TEST_F(DistCliTest, AKilledRankEndsTheJobNamingItAndLeavesNoProcess) {
  BRRR_NEED_GLOO();
  const pid_t launcher =
      start({"--config", "exp.yaml", "--set", "run.name=long", "--set", "train.max_steps=1000000",
             "--set", "data.num_workers=1", "--nproc-per-node", "2"});
  ASSERT_TRUE(wait_for_training("long")) << slurp(dir_ / "stderr");
  const pid_t victim = rank_pid(launcher, 1);
  ASSERT_GT(victim, 0) << "no rank 1 among the launcher's children";
  std::vector<pid_t> all = children_of(launcher);
  for (pid_t rank : children_of(launcher)) {
    for (pid_t worker : children_of(rank)) all.push_back(worker);
  }
  ASSERT_GE(all.size(), 4u) << "2 ranks with a loader worker each";
  const auto t0 = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  const Result r = finish(launcher, 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 30.0);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("rank 1 was killed by signal 9"), std::string::npos) << r.err;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (pid_t pid : all) EXPECT_FALSE(alive(pid)) << "process " << pid << " outlived the job";
}

TEST_F(DistCliTest, ARankThatHangsIsBoundedByTheTimeout) {
  BRRR_NEED_GLOO();
  // Rank 1 stops (SIGSTOP) without closing anything: rank 0 waits in a collective until
  // run.dist_timeout_s, fails naming it, and the launcher ends the stopped rank (SIGKILL).
  const pid_t launcher =
      start({"--config", "exp.yaml", "--set", "run.name=hung", "--set", "train.max_steps=1000000",
             "--set", "run.dist_timeout_s=3", "--nproc-per-node", "2"});
  ASSERT_TRUE(wait_for_training("hung")) << slurp(dir_ / "stderr");
  const pid_t stuck = rank_pid(launcher, 1);
  ASSERT_GT(stuck, 0);
  const std::vector<pid_t> ranks = children_of(launcher);
  const auto t0 = std::chrono::steady_clock::now();
  kill(stuck, SIGSTOP);
  const Result r = finish(launcher, 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 30.0);
  EXPECT_GE(took, 2.5) << "rank 0 gave up before run.dist_timeout_s";
  EXPECT_NE(r.exit_code, 0);
  // In the step's all-reduce or in the stop vote after it: either names the rank and the key.
  EXPECT_TRUE(has_line(r.err, "[rank 0] ", "rank 0 of 2: ")) << r.err;
  EXPECT_TRUE(has_line(r.err, "[rank 0] ", "run.dist_timeout_s = 3 s")) << r.err;
  EXPECT_NE(r.err.find("launcher: rank 0 exited with code 1"), std::string::npos) << r.err;
  for (pid_t pid : ranks) EXPECT_FALSE(alive(pid)) << "rank process " << pid << " outlived the job";
}

TEST_F(DistCliTest, SigtermToTheLauncherStopsEveryRankWithOneCheckpoint) {
  BRRR_NEED_GLOO();
  const pid_t launcher = start({"--config", "exp.yaml", "--set", "run.name=stopped", "--set",
                                "train.max_steps=1000000", "--nproc-per-node", "2"});
  ASSERT_TRUE(wait_for_training("stopped")) << slurp(dir_ / "stderr");
  kill(launcher, SIGTERM);
  const Result r = finish(launcher, 60);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  std::vector<std::string> checkpoints;
  for (const auto& e : fs::directory_iterator(dir_ / "runs" / "stopped" / "checkpoints")) {
    checkpoints.push_back(e.path().filename().string());
  }
  EXPECT_EQ(checkpoints.size(), 1u) << r.err;
  // Both ranks got the signal once, and stopped after the same step: the checkpoint's.
  EXPECT_TRUE(has_line(r.err, "[rank 0] ", "stopped by signal 15")) << r.err;
  EXPECT_TRUE(has_line(r.err, "[rank 1] ", "stopped by signal 15")) << r.err;
  EXPECT_EQ(r.err.find("launcher: rank"), std::string::npos) << "a rank failed: " << r.err;
  EXPECT_EQ(r.err.find("ERROR"), std::string::npos) << r.err;
}

TEST_F(DistCliTest, AnIncompleteEnvironmentOrBadCountExitsTwoNamingIt) {
  BRRR_NEED_GLOO();
  const Result bad_count = run({"--config", "exp.yaml", "--nproc-per-node", "0"});
  EXPECT_EQ(bad_count.exit_code, 2);
  EXPECT_NE(bad_count.err.find("--nproc-per-node needs a number of ranks >= 1, got '0'"),
            std::string::npos)
      << bad_count.err;
  // torchrun's variables, one missing or inconsistent.
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  unsetenv("MASTER_PORT");
  const Result no_port = run({"--config", "exp.yaml"});
  setenv("MASTER_PORT", "29999", 1);
  setenv("RANK", "2", 1);
  const Result bad_rank = run({"--config", "exp.yaml"});
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(name);
  EXPECT_EQ(no_port.exit_code, 2) << no_port.err;
  EXPECT_NE(no_port.err.find("MASTER_PORT"), std::string::npos) << no_port.err;
  EXPECT_EQ(bad_rank.exit_code, 2) << bad_rank.err;
  EXPECT_NE(bad_rank.err.find("RANK=2 is not in [0, WORLD_SIZE=2)"), std::string::npos)
      << bad_rank.err;
}

TEST_F(DistCliTest, NcclWorldOfOneThroughTheLauncherAndTorchrunMatchesOneProcessCuda) {
  if (!nccl_available() || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA or no NCCL";
  const std::vector<std::string> sets = {"run.device=cuda", "data.batch_size=32"};
  const Result one = train(0, "one", sets);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const Result launched = train(1, "launched", sets);
  ASSERT_EQ(launched.exit_code, 0) << launched.err;
  EXPECT_NE(launched.err.find("rank 0 of 1 on cuda:0 (NCCL backend)"), std::string::npos)
      << launched.err;
  const auto reference = losses("one");
  ASSERT_EQ(reference.size(), 12u);
  expect_close(losses("launched"), reference, 1e-6, "NCCL, 1 rank");
  expect_same_weights(weights("launched"), weights("one"), 1e-6);

  // torchrun's agent serves the store (TORCHELASTIC_USE_AGENT_STORE): the rank is its client.
  if (!test::python_imports("torch.distributed.run")) GTEST_SKIP() << "no torchrun here";
  int status = 0;
  const std::string out = test::run_command(
      "cd '" + dir_.string() + "' && " + BRRR_PYTHON +
          " -m torch.distributed.run --nproc-per-node 1 --no-python " + BRRR_TRAINER_EXE +
          " --config exp.yaml --set run.name=torchrun --set run.device=cuda --set "
          "data.batch_size=32 2>&1",
      &status);
  ASSERT_EQ(status, 0) << out;
  expect_close(losses("torchrun"), reference, 1e-6, "torchrun, 1 rank");
}

}  // namespace
}  // namespace brrr
