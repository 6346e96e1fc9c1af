// Weights in and out: safetensors written by brrr read back exactly (and by Python's
// safetensors), a Python torch.save(state_dict) OrderedDict and a safetensors file made by
// PyTorch give brrr's MLP PyTorch's logits, a brrr checkpoint's weights are found, malformed
// files are named, and a Hugging Face GPT2LMHeadModel's safetensors give brrr's gpt the logits
// transformers computes (where transformers is installed).
#include "models/weights_file.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "tests/models/golden_test_util.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& name) {
  return (fs::path(BRRR_GOLDEN_DIR) / name).string();
}

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("brrr_weights_{}_{}", name, getpid());
  brrr::test::remove_tree(dir);
  fs::create_directories(dir);
  brrr::test::remove_at_exit(dir);
  return dir;
}

std::shared_ptr<Model> golden_mlp() {
  ModelOptions o;
  o.name = "mlp";
  o.in_channels = 8;
  o.image_size = 1;
  o.hidden_sizes = {16};
  o.num_classes = 3;
  o.dropout = 0.0;
  return make_model(o);
}

at::Tensor mlp_logits(Model& model, const at::Tensor& x) {
  model.eval();
  torch::NoGradGuard no_grad;
  return model.forward(x);
}

TEST(WeightsFileTest, SafetensorsRoundTripIsExactForEveryDtype) {
  const fs::path dir = scratch("roundtrip");
  TensorMap tensors = {
      {"a.weight", torch::randn({3, 5})},
      {"b.half", torch::randn({7}).to(at::kHalf)},
      {"c.bf16", torch::randn({2, 2, 2}).to(at::kBFloat16)},
      {"d.long", torch::arange(10, at::kLong)},
      {"e.bool", torch::tensor({true, false, true})},
      {"f.scalar", torch::scalar_tensor(2.5)},
      {"g.empty", torch::empty({0, 4})},
      {"h.strided", torch::randn({4, 6}).t()},  // not contiguous
  };
  const std::string path = (dir / "w.safetensors").string();
  write_safetensors(path, tensors, {{"format", "pt"}});
  const TensorMap back = read_safetensors(path);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_EQ(back.count(name), 1u) << name;
    EXPECT_EQ(back.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(back.at(name).equal(t)) << name;
  }
  EXPECT_FALSE(fs::exists(path + fmt::format(".tmp.{}", getpid())));
  // PyTorch's side reads it too.
  const std::string check = fmt::format(
      "{} -c \"from safetensors.torch import load_file; t = load_file('{}'); "
      "assert t['a.weight'].shape == (3, 5) and t['d.long'].tolist() == list(range(10))\"",
      BRRR_PYTHON, path);
  if (std::system((std::string(BRRR_PYTHON) + " -c 'import safetensors' 2>/dev/null").c_str()) ==
      0) {
    EXPECT_EQ(std::system(check.c_str()), 0) << check;
  }
}

TEST(WeightsFileTest, PythonStateDictAndSafetensorsGivePyTorchsLogits) {
  const TensorMap expected = load_tensor_dict(golden("weights_mlp_expected.pt"));
  std::vector<std::string> files = {golden("weights_mlp_state_dict.pt")};
  if (fs::exists(golden("weights_mlp.safetensors")))
    files.push_back(golden("weights_mlp.safetensors"));
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    auto model = golden_mlp();
    load_state_dict(*model, read_weights_file(file));
    const at::Tensor logits = mlp_logits(*model, expected.at("x"));
    EXPECT_LT((logits - expected.at("logits")).abs().max().item<double>(), 1e-6);
  }
  if (files.size() == 1) GTEST_SKIP() << "safetensors is not installed: only torch.save checked";
}

TEST(WeightsFileTest, ALargeOrderedDictStateDictLoadsWhole) {
  const TensorMap many = load_tensor_dict(golden("weights_many_state_dict.pt"));
  const at::Tensor sums = load_tensor_dict(golden("weights_many_expected.pt")).at("sum");
  ASSERT_EQ(many.size(), 300u);
  for (int64_t i = 0; i < 150; ++i) {  // PyTorch's order: 0.weight, 0.bias, 1.weight, ...
    EXPECT_FLOAT_EQ(many.at(fmt::format("{}.weight", i)).sum().item<float>(),
                    sums[2 * i].item<float>());
    EXPECT_FLOAT_EQ(many.at(fmt::format("{}.bias", i)).sum().item<float>(),
                    sums[2 * i + 1].item<float>());
  }
}

TEST(WeightsFileTest, ABrrrCheckpointsModelEntryIsItsWeights) {
  const fs::path dir = scratch("ckpt");
  auto model = golden_mlp();
  c10::Dict<std::string, at::Tensor> weights;
  for (const auto& [name, t] : named_state(*model)) weights.insert(name, t);
  torch::serialize::OutputArchive archive;
  archive.write("model", c10::IValue(weights));
  archive.write("step", torch::scalar_tensor(3));
  const std::string path = (dir / "step.pt").string();
  archive.save_to(path);
  const TensorMap read = read_weights_file(path);
  ASSERT_EQ(read.size(), named_state(*model).size());
  for (const auto& [name, t] : named_state(*model)) EXPECT_TRUE(read.at(name).equal(t)) << name;
}

TEST(WeightsFileTest, MalformedFilesAreNamed) {
  const fs::path dir = scratch("bad");
  const std::string junk = (dir / "junk.bin").string();
  std::ofstream(junk) << "not weights at all";
  try {
    read_weights_file(junk);
    ADD_FAILURE() << "junk read as weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(junk), std::string::npos) << e.what();
  }
  // A header whose offsets run past the data.
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  const std::string bad = (dir / "short.safetensors").string();
  {
    std::ofstream out(bad, std::ios::binary);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << "12345678";  // 8 data bytes of 16
  }
  try {
    read_safetensors(bad);
    ADD_FAILURE() << "a truncated safetensors file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w'"), std::string::npos) << e.what();
  }
}

// The GPT-2-shaped test model of tests/golden/gen_weights.py (2 layers, 4 heads, width 64).
ModelOptions tiny_gpt(int64_t vocab_size) {
  ModelOptions o;
  o.name = "gpt";
  o.n_layer = 2;
  o.n_head = 4;
  o.n_embd = 64;
  o.block_size = 16;
  o.vocab_size = vocab_size;
  o.dropout = 0.0;
  o.fused = "false";
  return o;
}

TEST(WeightsFileTest, HuggingFaceGpt2GivesTransformersLogits) {
  const std::string file = golden("hf_gpt2/model.safetensors");
  if (!fs::exists(file)) GTEST_SKIP() << "transformers is not installed: no HF GPT-2 file";
  TensorMap hf = read_weights_file(file);
  ASSERT_TRUE(is_hf_gpt2(hf));
  const ModelOptions o = tiny_gpt(50304);  // padded to a multiple of 64, as brrr's GPT-2 configs do
  auto model = make_model(o);
  load_state_dict(*model, from_hf_gpt2(hf, o.vocab_size));
  const TensorMap expected = load_tensor_dict(golden("hf_gpt2_expected.pt"));
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(expected.at("tokens")).slice(-1, 0, 50257);
  EXPECT_LT((logits - expected.at("logits")).abs().max().item<double>(), 1e-4);
}

TensorMap named_tensors(const torch::nn::Module& model) {
  TensorMap out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value().detach();
  for (const auto& item : model.named_buffers()) out[item.key()] = item.value().detach();
  return out;
}

// Export to Hugging Face names and back: every Linear weight is transposed into Conv1D's layout,
// the vocabulary is cut to the rows asked for, and importing the result restores brrr's tensors
// exactly (the cut padding rows come back as zeros).
TEST(WeightsFileTest, HfGpt2ExportIsTheInverseOfTheImport) {
  torch::manual_seed(3);
  auto model = make_model(tiny_gpt(64));
  const TensorMap brrr = named_tensors(*model);
  const TensorMap hf = to_hf_gpt2(brrr, 60);
  EXPECT_TRUE(is_hf_gpt2(hf));
  EXPECT_EQ(hf.at("transformer.h.1.attn.c_attn.weight").sizes(), (c10::IntArrayRef{64, 192}));
  EXPECT_EQ(hf.at("transformer.h.0.mlp.c_fc.weight").sizes(), (c10::IntArrayRef{64, 256}));
  EXPECT_EQ(hf.at("transformer.wte.weight").sizes(), (c10::IntArrayRef{60, 64}));
  EXPECT_EQ(hf.at("lm_head.weight").sizes(), (c10::IntArrayRef{60, 64}));
  EXPECT_TRUE(at::equal(hf.at("transformer.h.0.attn.c_proj.weight"),
                        brrr.at("transformer.h.0.attn.c_proj.weight").t()));
  const TensorMap back = from_hf_gpt2(hf, 64);
  ASSERT_EQ(back.size(), brrr.size());
  for (const auto& [name, tensor] : brrr) {
    ASSERT_EQ(back.count(name), 1u) << name;
    at::Tensor expected = tensor;
    if (name == "transformer.wte.weight" || name == "lm_head.weight") {
      expected = tensor.clone();
      expected.slice(0, 60).zero_();
    }
    EXPECT_TRUE(at::equal(back.at(name), expected)) << name;
  }
  EXPECT_THROW(to_hf_gpt2(brrr, 65), Error);                          // fewer rows than asked
  EXPECT_THROW(to_hf_gpt2(named_tensors(*golden_mlp()), 10), Error);  // not a gpt
}

// The exported file in transformers itself: GPT2LMHeadModel loads it with strict=True and
// computes the logits brrr's model computes.
TEST(WeightsFileTest, HfGpt2ExportLoadsIntoTransformersStrictly) {
  if (!test::python_imports("transformers") || !test::python_imports("safetensors")) {
    GTEST_SKIP() << "transformers or safetensors is not installed";
  }
  torch::manual_seed(4);
  auto model = make_model(tiny_gpt(50304));
  model->eval();
  const fs::path dir = scratch("hf_export");
  write_safetensors((dir / "model.safetensors").string(), to_hf_gpt2(named_tensors(*model), 50257));
  const at::Tensor tokens = at::randint(0, 50257, {2, 16}, at::kLong);
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(tokens).slice(-1, 0, 50257).contiguous();
  }
  write_safetensors((dir / "expected.safetensors").string(),
                    {{"tokens", tokens}, {"logits", logits}});
  int status = 0;
  const std::string out =
      test::run_source_script("tests/models/check_hf_export.py", dir.string(), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("strict load ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace brrr
