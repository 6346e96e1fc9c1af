// RunOutputs: with `write` on it lays out the run directory; with `write` off (rank N, tests) the
// same calls write nothing at all, while the records are still kept in memory.
#include "trainer/run_outputs.h"

#include <gtest/gtest.h>
#include <torch/serialize/archive.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "core/checkpoint_io.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("brrr_run_outputs_" + name + "_" + std::to_string(::getpid()));
  test::remove_tree(dir);
  test::remove_at_exit(dir);
  return dir;
}

void exercise(RunOutputs& outputs) {
  outputs.begin(0);
  MetricRecord train;
  train.kind = RecordKind::kTrain;
  train.step = 1;
  train.values = {{"loss", 0.5}, {"samples_per_s", 10.0}, {"lr", 1e-9}};
  outputs.record(train);
  MetricRecord eval;
  eval.kind = RecordKind::kEval;
  eval.step = 1;
  eval.values = {{"val_loss", 0.25}};
  outputs.record(eval);
  outputs.log(log::Level::kInfo, "a line");
  auto fill = [](torch::serialize::OutputArchive& a) { a.write("x", at::ones({2})); };
  outputs.save_checkpoint(1, fill);
  outputs.save_best(fill);
  RunFacts facts;
  facts.step = 1;
  outputs.finish(facts);
}

TEST(RunOutputsTest, WritesTheRunDirectory) {
  const fs::path dir = scratch("on");
  RunOutputsOptions options;
  options.run_dir = dir.string();
  RunOutputs outputs(options, "run: {name: x}\n");
  exercise(outputs);
  EXPECT_TRUE(fs::exists(dir / "config.yaml"));
  EXPECT_TRUE(fs::exists(dir / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "step_00000001.pt"));
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "best.pt"));
  const auto records = read_metric_records((dir / "metrics.jsonl").string());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].kind, RecordKind::kTrain);
  EXPECT_EQ(records[0].values.at("lr"), 1e-9) << "no precision lost on the way";
  EXPECT_EQ(records[1].kind, RecordKind::kEval);
  EXPECT_EQ(records[2].kind, RecordKind::kSummary);
}

// What TensorBoard shows of a run: eval metrics under their plain names, the config as text; and
// a run that counted no tokens (not a language model) has no tokens_per_s in its summary.
TEST(RunOutputsTest, TensorBoardHasEvalTagsAndTheConfigText) {
  if (!test::python_imports("tensorboard")) GTEST_SKIP() << "python `tensorboard` not importable";
  const fs::path dir = scratch("tb");
  RunOutputsOptions options;
  options.run_dir = dir.string();
  {
    RunOutputs outputs(options, "run: {name: x}\n");
    exercise(outputs);
  }
  int status = 0;
  const std::string out =
      test::run_source_script("tests/trainer/observe/read_tb_events.py", dir.string(), &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("scalar\teval/loss\t1\t0.25\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("val_loss"), std::string::npos) << out;
  EXPECT_NE(out.find("scalar\ttrain/loss\t1\t0.5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("text\tconfig\t0\ttext\t'    run: {name: x}\\n'"), std::string::npos) << out;
  const auto records = read_metric_records((dir / "metrics.jsonl").string());
  ASSERT_EQ(records.back().kind, RecordKind::kSummary);
  EXPECT_EQ(records.back().values.count("tokens_per_s"), 0u);
  EXPECT_EQ(records.back().values.count("tokens_per_s_overall"), 0u);
}

TEST(RunOutputsTest, WithWriteOffNothingIsWrittenButRecordsAreKept) {
  const fs::path dir = scratch("off");
  RunOutputsOptions options;
  options.run_dir = dir.string();
  options.write = false;
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  {
    RunOutputs outputs(options, "run: {name: x}\n");
    exercise(outputs);
    ASSERT_EQ(outputs.history().size(), 3u);
    EXPECT_EQ(outputs.history()[2].kind, RecordKind::kSummary);
    EXPECT_FALSE(outputs.checkpoints().latest().has_value());
  }
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(fs::exists(dir)) << "a non-writing outputs object created " << dir;
  EXPECT_EQ(err, "");
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace brrr
