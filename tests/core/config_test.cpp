// Tests of the strict YAML config: defaults, every error kind with its exact message, `base:`
// inheritance, `--set` overrides of every value kind, and the to_yaml round trip.
#include "core/config.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "core/error.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

const std::string kMinimal =
    "model:\n"
    "  name: mlp\n"
    "data:\n"
    "  dataset: fashion_mnist\n";

const std::string kFixtures = std::string(BRRR_SOURCE_DIR) + "/tests/core/fixtures/config";

// The message of the ConfigError that `f` throws (a test failure when it throws none).
std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

std::string parse_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return config_error([&] { parse_config(yaml, "exp.yaml", overrides); });
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// A fresh directory for files a test writes, removed afterwards.
class ConfigFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "brrr_config_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { brrr::test::remove_tree(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }
  fs::path dir_;
};

TEST(ConfigTest, MinimalFileGetsDocumentedDefaultsAndResolvedDependents) {
  const ExperimentConfig c = parse_config(kMinimal);
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_EQ(c.run.device, "auto");
  EXPECT_EQ(c.train.max_steps, 1000);
  EXPECT_EQ(c.train.precision, "fp32");
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(c.data.num_workers, 4);
  // Dependent defaults: block_size 0 -> model.block_size; val inherits data's batch size and
  // defaults to sequential windows.
  EXPECT_EQ(c.data.block_size, 1024);
  EXPECT_EQ(c.data.val.block_size, 1024);
  EXPECT_EQ(c.data.val.batch_size, 64);
  EXPECT_EQ(c.data.val.windows, "sequential");
  EXPECT_EQ(c.data.windows, "random");
}

TEST(ConfigTest, ValKeysInheritFromDataOnlyWhenUnset) {
  const ExperimentConfig c = parse_config(kMinimal +
                                          "  batch_size: 32\n"
                                          "  block_size: 128\n"
                                          "  mean: [0.5]\n"
                                          "  std: [0.25]\n"
                                          "  token_dtype: uint32\n"
                                          "  val:\n"
                                          "    dataset: fashion_mnist\n"
                                          "    std: [0.5]\n");
  EXPECT_EQ(c.data.val.batch_size, 32);
  EXPECT_EQ(c.data.val.block_size, 128);
  EXPECT_EQ(c.data.val.mean, std::vector<double>{0.5});
  EXPECT_EQ(c.data.val.std, std::vector<double>{0.5});  // set explicitly: kept
  EXPECT_EQ(c.data.val.token_dtype, "uint32");
  EXPECT_TRUE(c.data.val.transforms.empty());
}

TEST(ConfigTest, UnknownKeyNamesFileLineColumnAndNearestKey) {
  EXPECT_EQ(parse_error(kMinimal + "train:\n  max_step: 5\n"),
            "unknown key 'train.max_step' at exp.yaml:6:3; did you mean 'train.max_steps'?");
  EXPECT_EQ(parse_error(kMinimal + "trian:\n  max_steps: 5\n"),
            "unknown key 'trian' at exp.yaml:5:1; did you mean 'train'?");
  // A key of another section is suggested by name.
  EXPECT_EQ(parse_error(kMinimal + "train:\n  lr: 0.1\n"),
            "unknown key 'train.lr' at exp.yaml:6:3; did you mean 'optim.lr'?");
  // Nothing close: the valid keys are listed.
  expect_contains(
      parse_error(kMinimal + "run:\n  colour: red\n"),
      "unknown key 'run.colour' at exp.yaml:6:3 (valid keys in 'run': name, "
      "output_dir, seed, device, num_threads, overwrite, strict_resume, dist_timeout_s)");
  EXPECT_EQ(parse_error(kMinimal + "  transforms: [{name: resize, sise: 4}]\n"),
            "unknown key 'data.transforms[0].sise' at exp.yaml:5:31; did you mean "
            "'data.transforms[0].size'?");
}

TEST(ConfigTest, WrongTypeNamesKeyPositionAndValue) {
  EXPECT_EQ(parse_error(kMinimal + "train:\n  max_steps: ten\n"),
            "train.max_steps at exp.yaml:6:14: expected an integer, got 'ten'");
  EXPECT_EQ(parse_error(kMinimal + "train:\n  max_steps: 1.5\n"),
            "train.max_steps at exp.yaml:6:14: expected an integer, got '1.5'");
  EXPECT_EQ(parse_error(kMinimal + "optim:\n  lr: fast\n"),
            "optim.lr at exp.yaml:6:7: expected a number, got 'fast'");
  EXPECT_EQ(parse_error(kMinimal + "  shuffle: maybe\n"),
            "data.shuffle at exp.yaml:5:12: expected a boolean (true or false), got 'maybe'");
  EXPECT_EQ(parse_error(kMinimal + "  batch_size: lots\n"),
            "data.batch_size at exp.yaml:5:15: expected an integer or 'auto', got 'lots'");
  EXPECT_EQ(parse_error(kMinimal + "optim:\n  betas: [0.9, x]\n"),
            "optim.betas[1] at exp.yaml:6:16: expected a number, got 'x'");
  EXPECT_EQ(parse_error(kMinimal + "run: 5\n"),
            "run at exp.yaml:5:6: expected a section of keys (name, output_dir, seed, device, "
            "num_threads, overwrite, strict_resume, dist_timeout_s), got '5'");
  EXPECT_EQ(parse_error(kMinimal + "train:\n  max_steps:\n"),
            "train.max_steps at exp.yaml:6:3: expected an integer, got nothing (null)");
}

TEST(ConfigTest, OutOfRangeAndInvalidEnumNameTheBound) {
  EXPECT_EQ(parse_error(kMinimal + "train:\n  grad_accum_steps: 0\n"),
            "train.grad_accum_steps at exp.yaml:6:21: must be >= 1, got 0");
  EXPECT_EQ(parse_error("model:\n  name: mlp\n  dropout: 1.5\ndata:\n  dataset: x\n"),
            "model.dropout at exp.yaml:3:12: must be in [0, 1), got 1.5");
  EXPECT_EQ(parse_error(kMinimal + "train:\n  precision: fp8\n"),
            "train.precision at exp.yaml:6:14: expected one of fp32, tf32, bf16, fp16, got 'fp8'");
  EXPECT_EQ(parse_error(kMinimal + "run:\n  device: gpu\n"),
            "run.device at exp.yaml:6:11: expected auto, cpu, cuda or cuda:N, got 'gpu'");
  EXPECT_EQ(parse_error(kMinimal + "  num_workers: -2\n"),
            "data.num_workers at exp.yaml:5:16: must be >= -1, got -2");
  EXPECT_EQ(parse_error(kMinimal + "  transforms: [{name: flip}]\n"),
            "data.transforms[0].name at exp.yaml:5:23: expected one of random_resized_crop, "
            "random_crop, resize, center_crop, horizontal_flip, got 'flip'");
  EXPECT_EQ(parse_config(kMinimal + "run:\n  device: cuda:3\n").run.device, "cuda:3");
}

TEST(ConfigTest, MissingRequiredKeyNamesTheFile) {
  EXPECT_EQ(parse_error("data:\n  dataset: x\n"),
            "model.name is required but exp.yaml (with its bases) does not set it");
  EXPECT_EQ(parse_error("model:\n  name: mlp\n"),
            "data.dataset is required but exp.yaml (with its bases) does not set it");
  EXPECT_EQ(parse_error("model:\n  name: ''\ndata:\n  dataset: x\n"),
            "model.name at exp.yaml:2:9: must not be empty");
  // A config built in code has no file to name.
  EXPECT_EQ(config_error([] { validate(ExperimentConfig()); }), "model.name is required");
}

TEST(ConfigTest, SyntaxErrorsAndDuplicatesNamePosition) {
  const std::string msg = parse_error(kMinimal + "train:\n  max_steps: [1, 2\n");
  EXPECT_EQ(msg.rfind("exp.yaml:7:1: YAML syntax error: ", 0), 0u) << msg;
  EXPECT_EQ(parse_error(kMinimal + "train:\n  log_every: 5\n  log_every: 6\n"),
            "train.log_every at exp.yaml:7:3: duplicate key");
  EXPECT_EQ(parse_error("- a\n- b\n"),
            "exp.yaml:1:1: expected a mapping of sections (run, model, data, ...), got a sequence");
}

TEST(ConfigTest, CrossFieldRulesNameTheKeyAndWhereItWasSet) {
  EXPECT_EQ(parse_error("model:\n  name: gpt\n  n_embd: 100\ndata:\n  dataset: x\n"),
            "model.n_embd at exp.yaml:3:11: must be a multiple of model.n_head (12), got 100");
  EXPECT_EQ(parse_error(kMinimal + "optim:\n  betas: [0.9]\n"),
            "optim.betas at exp.yaml:6:10: expected two values [beta1, beta2], got 1");
  EXPECT_EQ(parse_error(kMinimal + "optim:\n  betas: [0.9, 1.0]\n"),
            "optim.betas[1] at exp.yaml:6:10: must be in [0, 1), got 1.0");
  EXPECT_EQ(parse_error(kMinimal + "schedule:\n  name: cosine\n  warmup_steps: 2000\n"),
            "schedule.warmup_steps at exp.yaml:7:17: must be < train.max_steps (1000) for a "
            "decaying schedule, got 2000");
  EXPECT_EQ(parse_error(kMinimal + "  transforms:\n    - {name: random_crop}\n"),
            "data.transforms[0].size at exp.yaml:6:5: random_crop needs 1 or 2 positive values "
            "([side] or [height, width]), got 0");
  EXPECT_EQ(parse_error(kMinimal + "  transforms: [{name: resize, size: [1, 2, 3]}]\n"),
            "data.transforms[0].size at exp.yaml:5:15: resize needs 1 or 2 positive values "
            "([side] or [height, width]), got 3");
  EXPECT_EQ(parse_error(kMinimal + "  transforms: [{name: resize, size: [0]}]\n"),
            "data.transforms[0].size[0] at exp.yaml:5:37: must be >= 1, got 0");
  EXPECT_EQ(parse_error(kMinimal + "optim:\n  name: sgd\n  nesterov: true\n"),
            "optim.nesterov at exp.yaml:7:13: needs optim.momentum > 0");
  EXPECT_EQ(parse_error(kMinimal + "train:\n  early_stopping: {patience: 3}\n"),
            "train.early_stopping.patience at exp.yaml:6:30: needs evaluation data "
            "(data.val.dataset)");
  EXPECT_EQ(parse_error(kMinimal + "train:\n  profile: {memory: true}\n"),
            "train.profile.memory at exp.yaml:6:21: traces the allocations of the profiled "
            "steps: needs train.profile.steps > 0");
  EXPECT_EQ(parse_error(kMinimal + "train:\n  max_steps: 8\n  profile: {steps: 2}\n"),
            "train.profile.start_step at exp.yaml:6:14: must be < train.max_steps (8) for a "
            "trace to be recorded, got 10");
  EXPECT_TRUE(parse_config(kMinimal + "train:\n  profile: {steps: 2, memory: true}\n")
                  .train.profile.memory);
  const std::string chunked =
      "data:\n  dataset: fortunes\nmodel:\n  name: gpt\n  head_chunk_rows: 4096\n";
  EXPECT_EQ(parse_error(chunked + "  fused: false\n"),
            "model.head_chunk_rows at exp.yaml:5:20: chunks the fused head + loss: needs "
            "model.fused auto or true, got false");
  EXPECT_EQ(parse_config(chunked + "  fused: auto\n").model.head_chunk_rows, 4096);
  EXPECT_EQ(parse_error(kMinimal + "  mean: [0.5, 0.5, 0.5]\n  std: [0.2]\n"),
            "data.std at exp.yaml:6:8: must have as many values as data.mean (3), got 1");
}

TEST(ConfigTest, OverridesSetEveryValueKind) {
  const ExperimentConfig c = parse_config(
      kMinimal, "exp.yaml",
      {"train.max_steps=5", "optim.lr=0.01", "data.pin_memory=false", "train.precision=bf16",
       "run.name=my run", "model.hidden_sizes=[4, 8]", "optim.betas=[0.9,0.95]",
       "data.transforms=[{name: horizontal_flip}, {name: random_crop, size: 24, padding: 2}]",
       "data.batch_size=auto", "data.num_workers=auto", "schedule={name: step, gamma: 0.5}"});
  EXPECT_EQ(c.train.max_steps, 5);
  EXPECT_EQ(c.optim.lr, 0.01);
  EXPECT_FALSE(c.data.pin_memory);
  EXPECT_EQ(c.train.precision, "bf16");
  EXPECT_EQ(c.run.name, "my run");
  EXPECT_EQ(c.model.hidden_sizes, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.9, 0.95}));
  ASSERT_EQ(c.data.transforms.size(), 2u);
  EXPECT_EQ(c.data.transforms[0].name, "horizontal_flip");
  EXPECT_EQ(c.data.transforms[0].p, 0.5);
  EXPECT_EQ(c.data.transforms[1].size, std::vector<int64_t>{24});
  EXPECT_EQ(c.data.transforms[1].padding, 2);
  EXPECT_EQ(c.data.batch_size, 0);
  EXPECT_EQ(c.data.num_workers, -1);
  EXPECT_EQ(c.data.val.batch_size, 0);  // inherited after the override
  EXPECT_EQ(c.schedule.name, "step");   // a whole section merges key by key
  EXPECT_EQ(c.schedule.gamma, 0.5);
  EXPECT_EQ(c.schedule.step_size, 1000);
}

TEST(ConfigTest, OverrideErrorsNameTheAssignment) {
  EXPECT_EQ(parse_error(kMinimal, {"train.max_step=5"}),
            "--set train.max_step=5: unknown key 'train.max_step'; did you mean "
            "'train.max_steps'?");
  EXPECT_EQ(parse_error(kMinimal, {"trian.max_steps=5"}),
            "--set trian.max_steps=5: unknown key 'trian'; did you mean 'train'?");
  EXPECT_EQ(parse_error(kMinimal, {"train.max_steps=ten"}),
            "--set train.max_steps=ten: train.max_steps: expected an integer, got 'ten'");
  EXPECT_EQ(parse_error(kMinimal, {"train.grad_accum_steps=0"}),
            "--set train.grad_accum_steps=0: train.grad_accum_steps: must be >= 1, got 0");
  EXPECT_EQ(parse_error(kMinimal, {"train.precision=fp8"}),
            "--set train.precision=fp8: train.precision: expected one of fp32, tf32, bf16, fp16, "
            "got 'fp8'");
  EXPECT_EQ(parse_error(kMinimal, {"train.max_steps"}),
            "--set train.max_steps: expected key=value, e.g. --set train.max_steps=100");
  expect_contains(parse_error(kMinimal, {"optim.betas=[0.9"}),
                  "--set optim.betas=[0.9: the value is not valid YAML: ");
  // Cross-field rules see the overridden value and name the override.
  EXPECT_EQ(parse_error(kMinimal, {"model.n_head=5"}),
            "--set model.n_head=5: model.n_embd: must be a multiple of model.n_head (5), got 768");
}

TEST(ConfigTest, ApplyOverrideChecksAndKeepsConfigOnError) {
  ExperimentConfig c = parse_config(kMinimal);
  apply_override(c, "train.log_every=7");
  EXPECT_EQ(c.train.log_every, 7);
  const ExperimentConfig before = c;
  EXPECT_EQ(config_error([&] { apply_override(c, "train.log_every=0"); }),
            "--set train.log_every=0: train.log_every: must be >= 1, got 0");
  EXPECT_TRUE(c == before);
}

TEST(ConfigTest, EveryKeyIsRecognisedByOverrides) {
  const std::vector<std::string> keys = config_keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
  expect_contains(fmt::format("{}", fmt::join(keys, " ")), "data.val.batch_size");
  expect_contains(fmt::format("{}", fmt::join(keys, " ")), "data.transforms[].size");
  for (const auto& key : keys) {
    if (key.find("[]") != std::string::npos) continue;
    ExperimentConfig c = parse_config(kMinimal);
    // A mapping is no valid value of any key but the free-form option maps, and a sequence none
    // of those: the error must be about the value, not the key.
    const bool map = key.size() > 8 && key.compare(key.size() - 8, 8, ".options") == 0;
    const std::string value = map ? "[1, 2]" : "{a: 1}";
    const std::string msg = config_error([&] { apply_override(c, key + "=" + value); });
    expect_contains(msg, "--set " + key + "=" + value + ": " + key);
    EXPECT_EQ(msg.find("unknown key"), std::string::npos) << msg;
  }
  expect_contains(config_reference(), "train.max_steps");
}

TEST_F(ConfigFilesTest, BaseMergesMapsReplacesListsAndResolvesFromASubfolder) {
  write("configs/base.yaml",
        "model: {name: mlp, hidden_sizes: [1, 2, 3]}\n"
        "data:\n"
        "  dataset: fashion_mnist\n"
        "  transforms: [{name: horizontal_flip}, {name: random_crop, size: 28}]\n"
        "optim: {lr: 0.1, betas: [0.8, 0.9]}\n"
        "train: {max_steps: 500}\n");
  write("configs/mid.yaml", "base: base.yaml\ntrain: {log_every: 5}\n");
  const std::string child = write("configs/sub/child.yaml",
                                  "base: ../mid.yaml\n"
                                  "optim: {lr: 0.5}\n"
                                  "model: {hidden_sizes: [7]}\n"
                                  "data:\n"
                                  "  transforms: [{name: resize, size: [32, 32]}]\n");
  const ExperimentConfig c = load_config(child);
  EXPECT_EQ(c.source_path, child);
  EXPECT_EQ(c.optim.lr, 0.5);                                 // child overrides
  EXPECT_EQ(c.optim.betas, (std::vector<double>{0.8, 0.9}));  // deep merge keeps siblings
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_EQ(c.model.hidden_sizes, std::vector<int64_t>{7});  // lists replaced whole
  ASSERT_EQ(c.data.transforms.size(), 1u);
  EXPECT_EQ(c.data.transforms[0].name, "resize");
  EXPECT_EQ(c.train.max_steps, 500);  // from the chain's root
  EXPECT_EQ(c.train.log_every, 5);    // from the middle
  // Overrides come last.
  EXPECT_EQ(load_config(child, {"optim.lr=0.25"}).optim.lr, 0.25);
}

TEST_F(ConfigFilesTest, BaseCyclesAreErrorsNamingTheChain) {
  const std::string a = write("a.yaml", "base: b.yaml\nmodel: {name: mlp}\n");
  write("b.yaml", "base: sub/../a.yaml\n");
  const std::string msg = config_error([&] { load_config(a); });
  expect_contains(msg, "base cycle at " + (dir_ / "b.yaml").string() + ":1:7: ");
  expect_contains(msg, a + " -> " + (dir_ / "b.yaml").string() + " -> " + a);
  const std::string self = write("self.yaml", "base: self.yaml\n");
  expect_contains(config_error([&] { load_config(self); }), "base cycle");
}

TEST_F(ConfigFilesTest, ErrorsInsideABaseNameTheBaseFile) {
  const std::string base = write("base.yaml", "model:\n  name: mlp\n  n_layr: 2\n");
  const std::string child = write("child.yaml", "base: base.yaml\ndata: {dataset: x}\n");
  EXPECT_EQ(config_error([&] { load_config(child); }),
            "unknown key 'model.n_layr' at " + base + ":3:3; did you mean 'model.n_layer'?");
  write("base.yaml", "model: {name: mlp\n");
  expect_contains(config_error([&] { load_config(child); }), base + ":2:1: YAML syntax error: ");
  const std::string orphan = write("orphan.yaml", "base: missing.yaml\n");
  EXPECT_EQ(config_error([&] { load_config(orphan); }),
            "cannot read base config (base: at " + orphan + ":1:7) '" +
                (dir_ / "missing.yaml").string() + "': No such file or directory");
}

TEST_F(ConfigFilesTest, UnreadableFileNamesPathAndReason) {
  const std::string missing = (dir_ / "nope.yaml").string();
  EXPECT_EQ(config_error([&] { load_config(missing); }),
            "cannot read config file '" + missing + "': No such file or directory");
  EXPECT_EQ(config_error([&] { load_config(dir_.string()); }),
            "cannot read config file '" + dir_.string() + "': Is a directory");
}

TEST_F(ConfigFilesTest, ParseConfigResolvesBaseFromBaseDir) {
  write("base.yaml", kMinimal);
  const ExperimentConfig c =
      parse_config("base: base.yaml\ntrain: {max_steps: 9}\n", "<text>", {}, dir_.string());
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_EQ(c.train.max_steps, 9);
}

TEST(ConfigTest, CheckedInFixturesLoadWithTheirBase) {
  const ExperimentConfig full = load_config(kFixtures + "/full.yaml");
  EXPECT_EQ(full.run.device, "cuda:1");
  EXPECT_EQ(full.data.batch_size, 0);    // auto
  EXPECT_EQ(full.data.num_workers, -1);  // auto
  EXPECT_EQ(full.data.block_size, 128);  // model.block_size
  EXPECT_EQ(full.data.val.windows, "random");
  EXPECT_EQ(full.data.val.token_dtype, "uint32");
  ASSERT_EQ(full.data.transforms.size(), 2u);
  EXPECT_EQ(full.data.transforms[0].size, std::vector<int64_t>{224});
  EXPECT_EQ(full.data.transforms[0].scale, (std::vector<double>{0.35, 1.0}));
  EXPECT_EQ(full.data.transforms[1].p, 0.25);
  EXPECT_EQ(full.optim.fused, "true");
  EXPECT_EQ(full.train.fp16.growth_interval, 100);
  EXPECT_EQ(full.train.early_stopping.min_delta, 0.001);

  const ExperimentConfig child = load_config(kFixtures + "/child.yaml");
  EXPECT_EQ(child.model.n_layer, 4);
  EXPECT_EQ(child.model.n_embd, 64);
  EXPECT_EQ(child.optim.lr, 3.0e-4);
  EXPECT_EQ(child.optim.betas, (std::vector<double>{0.9, 0.95}));
  ASSERT_EQ(child.data.transforms.size(), 1u);
  EXPECT_EQ(child.data.transforms[0].size, (std::vector<int64_t>{32, 48}));
  EXPECT_TRUE(parse_config(to_yaml(child)) == child) << to_yaml(child);
}

// train.eval_steps meant batches per evaluation, Hugging Face's eval_steps means steps between
// evaluations: the old name fails, in a file and in --set, naming the new one.
TEST(ConfigTest, RenamedKeyIsAnErrorNamingTheNewKey) {
  EXPECT_EQ(parse_error(kMinimal + "train:\n  eval_steps: 20\n"),
            "train.eval_steps at exp.yaml:6:3: was renamed train.eval_batches (it is the number of "
            "batches per evaluation; Hugging Face's eval_steps (steps between evaluations) is "
            "train.eval_every)");
  expect_contains(parse_error(kMinimal, {"train.eval_steps=20"}),
                  "--set train.eval_steps=20: train.eval_steps: was renamed train.eval_batches");
  EXPECT_EQ(parse_config(kMinimal + "train:\n  eval_batches: 20\n").train.eval_batches, 20);
}

// A file counts its run in steps or in epochs, never both.
TEST(ConfigTest, MaxEpochsReplacesMaxStepsAndSettingBothIsAnError) {
  const ExperimentConfig epochs = parse_config(kMinimal + "train:\n  max_epochs: 3\n");
  EXPECT_EQ(epochs.train.max_epochs, 3);
  EXPECT_EQ(epochs.train.max_steps, 0);  // sized from the data by the trainer
  EXPECT_TRUE(parse_config(to_yaml(epochs)) == epochs);
  EXPECT_EQ(parse_config(kMinimal, "exp.yaml", {"train.max_epochs=2"}).train.max_steps, 0);

  EXPECT_EQ(parse_error(kMinimal + "train:\n  max_steps: 50\n  max_epochs: 3\n"),
            "train.max_steps at exp.yaml:6:14: set exactly one of train.max_steps and "
            "train.max_epochs (the other 0), got max_steps 50 and max_epochs 3");
  EXPECT_EQ(parse_error(kMinimal + "train:\n  max_steps: 0\n"),
            "train.max_steps at exp.yaml:6:14: set exactly one of train.max_steps and "
            "train.max_epochs (the other 0), got max_steps 0 and max_epochs 0");
  ExperimentConfig code = parse_config(kMinimal);
  code.train.max_epochs = 2;  // in code, max_steps keeps its default: both are set
  expect_contains(config_error([&] { validate(code); }), "set exactly one of train.max_steps");
}

// model.options / data.options: free-form maps for registered factories. Values keep their place,
// typed reads fail like schema keys, base files and --set merge key by key, and a key the
// factory never read is an error with a "did you mean".
TEST(ConfigTest, OptionMapsAreTypedWhereTheyAreRead) {
  const std::string text =
      "model:\n"
      "  name: tiny\n"
      "  options:\n"
      "    depth: four\n"
      "    widths: [8, 16]\n"
      "    gated: true\n"
      "data:\n"
      "  dataset: spirals\n"
      "  options: {size: 512, noise: 0.05, arms: [1, 2], label: spiral}\n";
  ExperimentConfig c = parse_config(text, "exp.yaml", {"model.options.scale=0.5"});
  const OptionMap& m = c.model.options;
  EXPECT_EQ(m.names(), (std::vector<std::string>{"depth", "gated", "scale", "widths"}));
  EXPECT_EQ(m.get_int_list("widths"), (std::vector<int64_t>{8, 16}));
  EXPECT_TRUE(m.get_bool("gated"));
  EXPECT_EQ(m.get_double("scale"), 0.5);
  EXPECT_EQ(m.get_int("missing", 7), 7);
  EXPECT_EQ(config_error([&] { m.get_int("depth"); }),
            "model.options.depth at exp.yaml:4:12: expected an integer, got 'four'");
  EXPECT_EQ(config_error([&] { m.get_int("layers"); }),
            "model.options.layers is required but not set");
  m.check_all_read("model 'tiny'");  // every option was read above (depth, though it failed)
  const OptionMap& d = c.data.options;
  EXPECT_EQ(d.get_int("size"), 512);
  EXPECT_EQ(d.get_double_list("arms"), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(d.get_string("label"), "spiral");
  EXPECT_EQ(config_error([&] { d.check_all_read("dataset 'spirals'"); }),
            "data.options.noise at exp.yaml:9:31: is not an option of dataset 'spirals' (it reads: "
            "arms, label, size)");
  EXPECT_EQ(config_error([&] { d.get_bool("size"); }),
            "data.options.size at exp.yaml:9:19: expected a boolean (true or false), got '512'");
  // data.val inherits data's options when it sets none.
  EXPECT_EQ(c.data.val.options, c.data.options);
  // A typo gets the nearest name that was read.
  ExperimentConfig typo = parse_config(text, "exp.yaml", {"model.options.widhts=3"});
  const OptionMap& t = typo.model.options;
  t.get_int_list("widths");
  t.get_bool("gated");
  t.get_string("depth");
  EXPECT_EQ(config_error([&] { t.check_all_read("model 'tiny'"); }),
            "--set model.options.widhts=3: model.options.widhts: is not an option of model 'tiny'; "
            "did you mean 'widths'?");
  // Round trip, and equality ignores where values were set.
  EXPECT_TRUE(parse_config(to_yaml(c)) == c) << to_yaml(c);
  expect_contains(to_yaml(c),
                  "  options: {depth: four, gated: true, scale: 0.5, widths: [8, 16]}\n");
  EXPECT_EQ(parse_error(kMinimal + "  options: [1, 2]\n"),
            "data.options at exp.yaml:5:12: expected a mapping of options ({name: value, ...}), "
            "got a sequence");
  EXPECT_EQ(parse_error(kMinimal, {"model.options.a.b=1"}),
            "--set model.options.a.b=1: model.options: option names must be plain names "
            "(letters, digits, _)");
}

TEST(ConfigTest, ToYamlRoundTripsTheDefaultConfig) {
  const ExperimentConfig c = parse_config(kMinimal);
  const std::string yaml = to_yaml(c);
  EXPECT_TRUE(parse_config(yaml) == c) << yaml;
  expect_contains(yaml, "train:\n  max_steps: 1000\n");
  expect_contains(yaml, "  val:\n    dataset: \"\"\n");
  expect_contains(yaml, "  early_stopping:\n    patience: 0\n");
}

TEST(ConfigTest, ToYamlRoundTripsAConfigWithEverySectionChanged) {
  ExperimentConfig c = parse_config(kMinimal);
  c.run.name = "quote \" backslash \\ tab \t colon: #hash é";
  c.run.output_dir = "out";
  c.run.seed = 42;
  c.run.device = "cuda:0";
  c.run.num_threads = 2;
  c.model.name = "true";  // a string that looks like a boolean
  c.model.hidden_sizes = {};
  c.model.channels = {3, 5, 8};
  c.model.stem = "small";
  c.model.dropout = 0.1 + 0.2;  // 0.30000000000000004 must survive
  c.model.n_head = 8;
  c.model.n_embd = 512;
  c.model.bias = false;
  c.data.dataset = "csv";
  c.data.batch_size = 0;    // auto
  c.data.num_workers = -1;  // auto
  c.data.mean = {0.485, 0.456, 0.406};
  c.data.std = {0.229, 0.224, 0.225};
  c.data.transforms.push_back(TransformOptions());
  c.data.transforms.back().name = "random_resized_crop";
  c.data.transforms.back().size = {224, 160};
  c.data.transforms.back().ratio = {1.0 / 3.0, 3.0};
  c.data.label_column = -3;
  c.data.header = false;
  c.data.timeout = 1e-300;
  c.data.val.dataset = "csv";
  c.data.val.limit = 100;
  c.data.val.windows = "random";
  c.optim.name = "sgd";
  c.optim.lr = 1.0 / 7.0;
  c.optim.momentum = 0.9;
  c.optim.nesterov = true;
  c.optim.eps = 1e-12;
  c.optim.fused = "false";
  c.schedule.name = "wsd";
  c.schedule.warmup_steps = 10;
  c.schedule.decay_ratio = 0.25;
  c.schedule.mode = "max";
  c.train.max_steps = 123456789012;
  c.train.precision = "fp16";
  c.train.best_metric = "val_acc";
  c.train.best_mode = "max";
  c.train.ema_decay = 0.9999;
  c.train.early_stopping.patience = 4;
  c.train.profile.steps = 3;
  c.train.profile.memory = true;
  c.train.fp16.init_scale = 1024.0;
  c.train.fp16.backoff_factor = 0.25;
  validate(c);
  const std::string yaml = to_yaml(c);
  const ExperimentConfig back = parse_config(yaml);
  EXPECT_TRUE(back == c) << yaml;
  EXPECT_EQ(back.model.dropout, 0.1 + 0.2);
  EXPECT_EQ(back.run.name, c.run.name);
  expect_contains(yaml, "  batch_size: auto\n");
  expect_contains(yaml, "  num_workers: auto\n");
  expect_contains(yaml, "  transforms:\n    - {name: \"random_resized_crop\", size: [224, 160]");
  // Equality really compares: one changed field anywhere makes configs differ.
  ExperimentConfig other = back;
  other.train.fp16.growth_interval += 1;
  EXPECT_TRUE(other != c);
  other = back;
  other.data.val.transforms = c.data.transforms;
  EXPECT_TRUE(other != c);
}

// The experiments shipped in configs/ are part of the product: each must load and round-trip.
TEST(ConfigTest, EveryShippedExperimentLoadsAndRoundTrips) {
  size_t loaded = 0;
  for (const auto& entry :
       fs::recursive_directory_iterator(std::string(BRRR_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const ExperimentConfig c = load_config(entry.path().string());
    EXPECT_TRUE(parse_config(to_yaml(c)) == c) << to_yaml(c);
    ++loaded;
  }
  EXPECT_GT(loaded, 0u);
}

TEST(ConfigTest, ValuesThatCannotWorkAreRejectedWithTheirPlace) {
  // Every float is finite.
  EXPECT_EQ(parse_error(kMinimal + "optim:\n  lr: .inf\n"),
            "optim.lr at exp.yaml:6:7: must be a finite number, got .inf");
  expect_contains(parse_error(kMinimal + "optim:\n  betas: [0.9, .nan]\n"),
                  "optim.betas[1] at exp.yaml:6:10: must be a finite number");
  // `auto` is spelled auto: the number it is stored as is not a value.
  EXPECT_EQ(
      parse_error(kMinimal + "  batch_size: 0\n"),
      "data.batch_size at exp.yaml:5:15: 0 is not a valid value; write auto to have it chosen");
  expect_contains(parse_error(kMinimal + "  num_workers: -1\n"),
                  "data.num_workers at exp.yaml:5:16");
  EXPECT_EQ(parse_config(kMinimal + "  batch_size: auto\n", "exp.yaml").data.batch_size, 0);
  // Names cannot leave their folder.
  for (const char* name : {"a/b", "..", "."}) {
    expect_contains(parse_error(kMinimal + "run:\n  name: '" + name + "'\n"),
                    "run.name at exp.yaml:6:9: must be a single folder name");
  }
  EXPECT_EQ(
      parse_error("model:\n  name: convnet\n  channels: []\ndata:\n  dataset: fashion_mnist\n"),
      "model.channels at exp.yaml:3:13: convnet needs at least one block width, got []");
}

TEST(ConfigTest, OriginsLocateKeysForErrorsFoundAfterLoading) {
  const ExperimentConfig c =
      parse_config(kMinimal + "  batch_size: 64\n", "exp.yaml", {"train.max_steps=9"});
  EXPECT_EQ(config_message(c, "data.batch_size", "too big"),
            "data.batch_size at exp.yaml:5:15: too big");
  EXPECT_EQ(config_message(c, "train.max_steps", "x"),
            "--set train.max_steps=9: train.max_steps: x");
  EXPECT_EQ(config_message(c, "model.num_classes", "x"), "model.num_classes: x");
}

}  // namespace
}  // namespace brrr
