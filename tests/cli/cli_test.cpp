// The `trainer` command as a user runs it: exit codes, --help/--version, config errors with
// file:line, --print-config round trip, --dry-run, a real run's files, SIGTERM with resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/config.h"
#include "tests/cli/cli_test_util.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

TEST_F(CliTest, HelpAndVersionExitZero) {
  Result help = run({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage:"), std::string::npos);
  EXPECT_NE(help.out.find("--print-config"), std::string::npos);
  Result version = run({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("brrr ", 0), 0u) << version.out;
  // --help-config: every key, then the model and dataset names (a program's registered ones too).
  Result keys = run({"--help-config"});
  EXPECT_EQ(keys.exit_code, 0);
  EXPECT_NE(keys.out.find("model.options "), std::string::npos) << keys.out;
  EXPECT_NE(keys.out.find("or one given to brrr::register_model"), std::string::npos) << keys.out;
  EXPECT_NE(keys.out.find("\nmodel.name: mlp, convnet, resnet18, resnet50, gpt\n"),
            std::string::npos)
      << keys.out;
  EXPECT_NE(keys.out.find("\ndata.dataset: fashion_mnist, image_folder, token_file, csv\n"),
            std::string::npos)
      << keys.out;
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(run({}).exit_code, 2);
  Result unknown = run({"--config", "x.yaml", "--bogus"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("unknown argument '--bogus'"), std::string::npos) << unknown.err;
  Result missing_value = run({"--config"});
  EXPECT_EQ(missing_value.exit_code, 2);
  EXPECT_NE(missing_value.err.find("--config needs a value"), std::string::npos)
      << missing_value.err;
}

TEST_F(CliTest, MalformedFileExitsTwoNamingFileAndLine) {
  write("bad.yaml", "model: {name: mlp}\ndata:\n  dataset: csv\n  batch_size: [1, 2\n");
  Result r = run({"--config", "bad.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.yaml:"), std::string::npos) << r.err;
}

// make_model/make_dataset see no file; the trainer names where the name was set.
TEST_F(CliTest, UnknownModelOrDatasetNameExitsTwoNamingFileAndLine) {
  write_csv_experiment(5);
  Result model = run({"--config", "exp.yaml", "--set", "model.name=mlpp"});
  EXPECT_EQ(model.exit_code, 2);
  EXPECT_NE(model.err.find("--set model.name=mlpp: model.name: unknown model 'mlpp'; valid names: "
                           "mlp, convnet"),
            std::string::npos)
      << model.err;
  write("exp2.yaml", "base: exp.yaml\ndata:\n  dataset: cvs\n");
  Result dataset = run({"--config", "exp2.yaml"});
  EXPECT_EQ(dataset.exit_code, 2);
  EXPECT_NE(dataset.err.find("data.dataset at exp2.yaml:3:12: unknown dataset 'cvs'; "
                             "valid names: "),
            std::string::npos)
      << dataset.err;
}

TEST_F(CliTest, UnknownKeyExitsTwoWithSuggestion) {
  write_csv_experiment(5);
  Result r = run({"--config", "exp.yaml", "--set", "train.max_step=3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("train.max_steps"), std::string::npos) << r.err;
  Result missing = run({"--config", "nope.yaml"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nope.yaml"), std::string::npos) << missing.err;
}

TEST_F(CliTest, PrintConfigLoadsBackToTheSameConfig) {
  const fs::path exp = write_csv_experiment(5);
  Result r = run({"--config", "exp.yaml", "--set", "train.precision=bf16", "--set",
                  "optim.betas=[0.8,0.9]", "--print-config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path printed = write("printed.yaml", r.out);
  const ExperimentConfig original =
      load_config(exp.string(), {"train.precision=bf16", "optim.betas=[0.8,0.9]"});
  ExperimentConfig reloaded = load_config(printed.string());
  reloaded.source_path = original.source_path;
  EXPECT_EQ(reloaded, original);
  EXPECT_EQ(reloaded.train.precision, "bf16");
}

TEST_F(CliTest, DryRunPrintsThePlan) {
  write_csv_experiment(5);
  Result r = run({"--config", "exp.yaml", "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"device", "precision", "parameters", "batch", "num_workers"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from:\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "csvrun" / "metrics.jsonl"));  // nothing trained
}

TEST_F(CliTest, RunWritesResolvedConfigAndMetrics) {
  write_csv_experiment(12);
  Result r = run({"--config", "exp.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path run_dir = dir_ / "runs" / "csvrun";
  EXPECT_TRUE(fs::exists(run_dir / "config.yaml"));
  const std::string metrics = slurp(run_dir / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"kind\": \"summary\""), std::string::npos) << metrics;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step_00000012.pt"));
}

TEST_F(CliTest, ProfileWithMemoryWritesATraceOfAllocationsThatMemoryPeakReplays) {
  write_csv_experiment(6);
  Result r = run({"--config", "exp.yaml", "--set", "train.profile.start_step=2", "--set",
                  "train.profile.steps=2", "--set", "train.profile.memory=true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path trace = dir_ / "runs" / "csvrun" / "trace.json";
  ASSERT_TRUE(fs::exists(trace)) << r.err;
  EXPECT_NE(slurp(trace).find("\"[memory]\""), std::string::npos);
  int status = 0;
  const std::string out =
      test::run_source_script("scripts/memory_peak.py", "--device cpu " + trace.string(), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(trace.string() + ": peak "), std::string::npos) << out;
}

TEST_F(CliTest, RuntimeFailureExitsOne) {
  write_csv_experiment(5);
  Result r = run({"--config", "exp.yaml", "--set", "data.path=missing.csv"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("missing.csv"), std::string::npos) << r.err;
}

TEST_F(CliTest, SigtermSavesACheckpointAndResumeContinues) {
  write_csv_experiment(1000000);
  const pid_t pid = start({"--config", "exp.yaml"});
  const fs::path metrics = dir_ / "runs" / "csvrun" / "metrics.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(metrics) || fs::file_size(metrics) < 2000)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(metrics)) << "the trainer never started logging";
  kill(pid, SIGTERM);
  Result r = finish(pid);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("stop requested"), std::string::npos) << r.err;
  std::vector<fs::path> checkpoints;
  for (const auto& e : fs::directory_iterator(dir_ / "runs" / "csvrun" / "checkpoints")) {
    checkpoints.push_back(e.path());
  }
  ASSERT_EQ(checkpoints.size(), 1u);
  const std::string name = checkpoints[0].filename().string();
  const int64_t stopped_at = std::stoll(name.substr(5, 8));
  EXPECT_GT(stopped_at, 0);

  Result resumed = run({"--config", "exp.yaml", "--resume", "auto", "--set",
                        "train.max_steps=" + std::to_string(stopped_at + 5)});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from"), std::string::npos) << resumed.err;
}

}  // namespace
}  // namespace brrr
