#pragma once
// The `trainer` binary run as a user runs it, for the cli suite: a fixture that spawns it in a
// scratch directory with stdout/stderr captured to files, and a small CSV experiment to train.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_fs.h"

extern char** environ;

namespace brrr {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The direct children of `parent` (a trainer's loader workers, a launcher's ranks), from
// /proc/*/stat ("pid (comm) state ppid ...").
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("brrr_cli_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(getpid()));
    brrr::test::remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    for (pid_t pid : started_) {  // a test that stopped early (a failed ASSERT) leaves none running
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    brrr::test::remove_tree(dir_);
  }

  // Starts the trainer with stdout/stderr redirected to files; returns its pid.
  pid_t start(const std::vector<std::string>& args) {
    std::vector<std::string> argv_s = {BRRR_TRAINER_EXE};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, (dir_ / "stdout").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, (dir_ / "stderr").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addchdir_np(&actions, dir_.c_str());
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    started_.push_back(pid);
    return pid;
  }

  // Waits for the trainer, at most `limit_s`: one that does not end is a test failure (and is
  // killed), never a hung test.
  Result finish(pid_t pid, double limit_s = 180) {
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    bool ended = false;
    while (!(ended = waitpid(pid, &status, WNOHANG) == pid) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!ended) {
      ADD_FAILURE() << "the trainer (pid " << pid << ") did not end within " << limit_s
                    << " s; killed it";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    started_.erase(std::remove(started_.begin(), started_.end(), pid), started_.end());
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(dir_ / "stdout");
    r.err = slurp(dir_ / "stderr");
    return r;
  }

  Result run(const std::vector<std::string>& args) { return finish(start(args)); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  // A small CSV classification problem and a config that trains an MLP on it.
  fs::path write_csv_experiment(int64_t max_steps) {
    std::ofstream csv(dir_ / "train.csv");
    csv << "a,b,c,label\n";
    for (int i = 0; i < 512; ++i) {
      const int label = i % 2;
      csv << (label ? 1.0 : -1.0) + 0.01 * (i % 7) << "," << 0.5 * (i % 5) << ","
          << (label ? -0.3 : 0.4) << "," << label << "\n";
    }
    return write(
        "exp.yaml",
        "run: {name: csvrun, output_dir: runs, seed: 3, device: cpu}\n"
        "model: {name: mlp, in_channels: 3, image_size: 1, num_classes: 2, hidden_sizes: [8]}\n"
        "data: {dataset: csv, path: train.csv, batch_size: 16, num_workers: 0}\n"
        "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
        "train: {max_steps: " +
            std::to_string(max_steps) + ", log_every: 1, checkpoint_every: 0}\n");
  }

  fs::path dir_;
  std::vector<pid_t> started_;
};

}  // namespace brrr
