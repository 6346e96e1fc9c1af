// Ways in and out at the command line: `trainer export` writes safetensors that PyTorch loads
// into the matching module with strict=True, `trainer eval` scores a checkpoint without training
// or writing one, `model.init_from` starts a run from exported weights (and names a mismatch).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "tests/cli/cli_test_util.h"

namespace brrr {
namespace {

class WeightsCliTest : public CliTest {
 protected:
  fs::path run_dir() const { return dir_ / "runs" / "csvrun"; }
};

TEST_F(WeightsCliTest, ExportGivesSafetensorsThatPyTorchLoadsStrictly) {
  write_csv_experiment(4);
  ASSERT_EQ(run({"--config", "exp.yaml"}).exit_code, 0);
  Result r = run({"export", "runs/csvrun"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path file = run_dir() / "checkpoints" / "step_00000004.safetensors";
  ASSERT_TRUE(fs::exists(file)) << r.err;
  if (std::system((std::string(BRRR_PYTHON) + " -c 'import safetensors' 2>/dev/null").c_str()) !=
      0) {
    GTEST_SKIP() << "safetensors is not installed";
  }
  // The README's three lines, against the PyTorch twin of brrr's mlp (tests/golden/gen_models.py).
  const std::string script = fmt::format(
      "import sys; sys.path.insert(0, '{}/tests/golden'); from gen_models import Mlp; "
      "from safetensors.torch import load_file; "
      "m = Mlp(3, [8], 2); m.load_state_dict(load_file('{}'), strict=True)",
      BRRR_SOURCE_DIR, file.string());
  EXPECT_EQ(std::system(fmt::format("{} -c \"{}\"", BRRR_PYTHON, script).c_str()), 0) << script;
}

// Hugging Face names are for gpt weights only; a bad flag value is a usage error naming it.
TEST_F(WeightsCliTest, ExportWithHfNamesRefusesWhatIsNotGpt) {
  write_csv_experiment(2);
  ASSERT_EQ(run({"--config", "exp.yaml"}).exit_code, 0);
  Result mlp = run({"export", "runs/csvrun", "--names", "hf-gpt2"});
  EXPECT_EQ(mlp.exit_code, 2) << mlp.err;
  EXPECT_NE(mlp.err.find("trainer export --names hf-gpt2: "), std::string::npos) << mlp.err;
  EXPECT_NE(mlp.err.find("not the weights of a brrr gpt model"), std::string::npos) << mlp.err;
  Result names = run({"export", "runs/csvrun", "--names", "onnx"});
  EXPECT_EQ(names.exit_code, 2);
  EXPECT_NE(names.err.find("--names onnx is not one of brrr, hf-gpt2"), std::string::npos)
      << names.err;
  Result vocab = run({"export", "runs/csvrun", "--names", "hf-gpt2", "--vocab-size", "big"});
  EXPECT_EQ(vocab.exit_code, 2);
  EXPECT_NE(vocab.err.find("--vocab-size needs a positive integer, got 'big'"), std::string::npos)
      << vocab.err;
}

TEST_F(WeightsCliTest, EvalScoresACheckpointAndWritesNoCheckpoint) {
  write_csv_experiment(4);
  ASSERT_EQ(run({"--config", "exp.yaml"}).exit_code, 0);
  const std::vector<std::string> val = {"--set", "data.val.dataset=csv", "--set",
                                        "data.val.path=train.csv"};
  std::vector<std::string> args = {"eval", "--config", "exp.yaml", "--checkpoint", "auto"};
  args.insert(args.end(), val.begin(), val.end());
  Result r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("val_accuracy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(step 4)"), std::string::npos) << r.out;
  const std::string recorded = slurp(run_dir() / "eval.jsonl");
  EXPECT_NE(recorded.find("\"val_loss\""), std::string::npos) << recorded;
  size_t checkpoints = 0;
  for (const auto& e : fs::directory_iterator(run_dir() / "checkpoints"))
    checkpoints += e.is_regular_file();
  EXPECT_EQ(checkpoints, 1u);
  Result missing = run({"eval", "--config", "exp.yaml"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
}

TEST_F(WeightsCliTest, InitFromStartsARunFromExportedWeightsAndNamesAMismatch) {
  write_csv_experiment(4);
  ASSERT_EQ(run({"--config", "exp.yaml"}).exit_code, 0);
  ASSERT_EQ(run({"export", "runs/csvrun", "--out", "w.safetensors"}).exit_code, 0);
  Result r = run({"--config", "exp.yaml", "--set", "run.name=second", "--set",
                  "model.init_from=w.safetensors", "--set", "train.max_steps=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("model.init_from: loaded 4 tensors"), std::string::npos) << r.err;
  // The checkpoint itself works as a source too.
  Result from_ckpt = run({"--config", "exp.yaml", "--set", "run.name=third", "--set",
                          "model.init_from=runs/csvrun/checkpoints/step_00000004.pt", "--set",
                          "train.max_steps=1"});
  EXPECT_EQ(from_ckpt.exit_code, 0) << from_ckpt.err;
  Result wrong = run({"--config", "exp.yaml", "--set", "run.name=fourth", "--set",
                      "model.init_from=w.safetensors", "--set", "model.hidden_sizes=[16]"});
  EXPECT_EQ(wrong.exit_code, 2) << wrong.err;
  EXPECT_NE(wrong.err.find("model.init_from: "), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("key 'head.weight' has shape [2, 8] in the source but [2, 16] in the "
                           "model"),
            std::string::npos)
      << wrong.err;
}

}  // namespace
}  // namespace brrr
