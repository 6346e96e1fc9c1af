// Faults and bad input at the command line, as a hostile user produces them: SIGTERM while a
// loader worker is SIGSTOPped, two trainers on one run directory, a finished run started again,
// values that cannot work, a config that is not a file, libtorch errors. Each must end with a
// clear message and the documented exit code, within seconds, losing nothing.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/cli/cli_test_util.h"

namespace brrr {
namespace {

using Clock = std::chrono::steady_clock;

bool wait_for(const std::function<bool()>& condition, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

bool alive(pid_t pid) {
  return kill(pid, 0) == 0 || errno != ESRCH;
}

class CliFaultsTest : public CliTest {
 protected:
  fs::path run_dir() const { return dir_ / "runs" / "csvrun"; }
  bool logging() const {
    return fs::exists(run_dir() / "metrics.jsonl") &&
           fs::file_size(run_dir() / "metrics.jsonl") > 500;
  }
};

TEST_F(CliFaultsTest, SigtermWhileAWorkerIsStoppedCheckpointsAndExitsWithinSeconds) {
  write_csv_experiment(1000000);
  const pid_t pid = start({"--config", "exp.yaml", "--set", "data.num_workers=2", "--set",
                           "data.timeout=0", "--set", "data.stall_warning_s=1"});
  ASSERT_TRUE(wait_for([&] { return logging(); }, 60)) << "the trainer never started logging";
  const std::vector<pid_t> workers = children_of(pid);
  ASSERT_EQ(workers.size(), 2u);
  kill(workers[0], SIGSTOP);
  // The loader names the batch, the worker and its state once the wait passes 1 s.
  ASSERT_TRUE(
      wait_for([&] { return slurp(dir_ / "stderr").find("waited") != std::string::npos; }, 20))
      << slurp(dir_ / "stderr");
  const auto signalled = Clock::now();
  kill(pid, SIGTERM);
  Result r = finish(pid);
  const double seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_LT(seconds, 5.0) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find(fmt::format("pid {}, stopped", workers[0])), std::string::npos) << r.err;
  std::vector<fs::path> checkpoints;
  for (const auto& e : fs::directory_iterator(run_dir() / "checkpoints"))
    checkpoints.push_back(e.path());
  ASSERT_EQ(checkpoints.size(), 1u) << r.err;
  // No worker outlives the trainer, the stopped one included.
  for (pid_t w : workers) EXPECT_TRUE(wait_for([&] { return !alive(w); }, 5)) << "worker " << w;
  for (pid_t w : workers) kill(w, SIGCONT);

  const int64_t stopped_at = std::stoll(checkpoints[0].filename().string().substr(5, 8));
  Result resumed = run({"--config", "exp.yaml", "--resume", "auto", "--set",
                        "train.max_steps=" + std::to_string(stopped_at + 3)});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
}

TEST_F(CliFaultsTest, ASecondTrainerOnTheSameRunExitsTwoNamingTheFirstOnesPid) {
  write_csv_experiment(1000000);
  const pid_t first = start({"--config", "exp.yaml"});
  ASSERT_TRUE(wait_for([&] { return logging(); }, 60)) << "the trainer never started logging";
  // A second trainer in the same scratch directory; stdout/stderr to other files.
  const fs::path second_dir = dir_ / "second";
  fs::create_directories(second_dir);
  Result second = run({"--config", "exp.yaml", "--resume", "auto"});
  kill(first, SIGTERM);
  Result r = finish(first);
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find(fmt::format("in use by another trainer (pid {})", first)),
            std::string::npos)
      << second.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
}

TEST_F(CliFaultsTest, RerunningAFinishedRunWithoutResumeExitsTwoAndTouchesNothing) {
  write_csv_experiment(4);
  ASSERT_EQ(run({"--config", "exp.yaml"}).exit_code, 0);
  const std::string checkpoint = slurp(run_dir() / "checkpoints" / "step_00000004.pt");
  const std::string metrics = slurp(run_dir() / "metrics.jsonl");
  Result again = run({"--config", "exp.yaml"});
  EXPECT_EQ(again.exit_code, 2) << again.err;
  EXPECT_NE(again.err.find("already holds a run"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("run.overwrite"), std::string::npos) << again.err;
  EXPECT_EQ(slurp(run_dir() / "checkpoints" / "step_00000004.pt"), checkpoint);
  EXPECT_EQ(slurp(run_dir() / "metrics.jsonl"), metrics);
  Result overwritten = run({"--config", "exp.yaml", "--set", "run.overwrite=true"});
  EXPECT_EQ(overwritten.exit_code, 0) << overwritten.err;
}

TEST_F(CliFaultsTest, ValuesThatCannotWorkExitTwoNamingTheKeyAndPlace) {
  write_csv_experiment(4);
  struct Case {
    std::string set, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"optim.lr=.inf", "optim.lr: must be a finite number"},
           {"run.name=../escape", "run.name: must be a single folder name"},
           {"data.batch_size=0", "data.batch_size: 0 is not a valid value; write auto"},
           {"model.num_classes=1", "model.num_classes"},
       }) {
    Result r = run({"--config", "exp.yaml", "--set", c.set});
    EXPECT_EQ(r.exit_code, 2) << c.set << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.set << ": " << r.err;
  }
  write("channels.yaml", "base: exp.yaml\nmodel:\n  name: convnet\n  channels: []\n");
  Result channels = run({"--config", "channels.yaml"});
  EXPECT_EQ(channels.exit_code, 2) << channels.err;
  EXPECT_NE(channels.err.find("model.channels at channels.yaml:4:"), std::string::npos)
      << channels.err;
}

TEST_F(CliFaultsTest, AConfigThatIsNotARegularFileIsRefusedAtOnce) {
  const auto t0 = Clock::now();
  Result r = run({"--config", "/dev/zero"});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

TEST_F(CliFaultsTest, ALibtorchErrorIsOneLineWithoutAStackTrace) {
  write_csv_experiment(4);
  // A 3 x 10^14 weight (1.2 PB, more than the 128 TiB a process can address, so the allocation
  // fails even where the kernel overcommits memory without limit, as on the GPU machine, which
  // granted 12 TB and then paged for minutes): libtorch's allocator refuses it with a c10::Error
  // (and its trace).
  Result r = run({"--config", "exp.yaml", "--set", "model.hidden_sizes=[100000000000000]"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("can't allocate memory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("frame #"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Exception raised from"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("BRRR_DEBUG=1"), std::string::npos) << r.err;
}

TEST_F(CliFaultsTest, ResumeFromADirectorySaysItIsOne) {
  write_csv_experiment(4);
  ASSERT_EQ(run({"--config", "exp.yaml"}).exit_code, 0);
  Result r = run({"--config", "exp.yaml", "--resume", "runs/csvrun"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace brrr
