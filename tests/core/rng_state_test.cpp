// RNG state capture/restore: after a restore, every draw repeats exactly (CPU here; CUDA on a
// GPU machine), also through a checkpoint archive.
#include "core/rng_state.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

#include "core/error.h"

namespace brrr {
namespace {

// A mix of the ops that consume the CPU generator, including randn, whose Box-Muller pairs
// leave a cached sample inside the generator state.
at::Tensor draw(c10::Device device = c10::kCPU) {
  auto opts = torch::TensorOptions().device(device);
  return torch::cat({torch::rand({5}, opts), torch::randn({3}, opts),
                     torch::randint(0, 1000, {4}, opts).to(torch::kFloat),
                     torch::dropout(torch::ones({8}, opts), 0.5, /*train=*/true)})
      .cpu();
}

TEST(RngStateTest, RestoreRepeatsCpuDraws) {
  torch::manual_seed(123);
  draw();
  const RngState saved = capture_rng_state();
  const at::Tensor first = draw();
  const at::Tensor other = draw();
  ASSERT_FALSE(torch::equal(first, other));  // the generator really advanced
  restore_rng_state(saved);
  EXPECT_TRUE(torch::equal(draw(), first));
  EXPECT_TRUE(torch::equal(draw(), other));
}

TEST(RngStateTest, ScalarNormalDrawRepeatsAfterRestore) {
  // A single normal sample leaves the second Box-Muller value cached in the generator.
  torch::manual_seed(5);
  torch::randn({1});
  const RngState saved = capture_rng_state();
  const at::Tensor a = torch::randn({1});
  restore_rng_state(saved);
  EXPECT_TRUE(torch::equal(torch::randn({1}), a));
}

TEST(RngStateTest, RoundTripsThroughAnArchive) {
  torch::manual_seed(7);
  draw();
  const RngState saved = capture_rng_state();
  const at::Tensor expected = draw();

  torch::serialize::OutputArchive out;
  save_rng_state(out, saved);
  std::stringstream bytes;
  out.save_to(bytes);

  torch::manual_seed(999);  // a different process state, as after a restart
  draw();
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  const RngState loaded = load_rng_state(in);
  EXPECT_EQ(loaded.cuda.size(), saved.cuda.size());
  restore_rng_state(loaded);
  EXPECT_TRUE(torch::equal(draw(), expected));
}

TEST(RngStateTest, MissingKeyThrowsCheckpointErrorNamingIt) {
  torch::serialize::OutputArchive out;
  out.write("something_else", torch::zeros({1}));
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  try {
    load_rng_state(in, "rng_states");
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("rng_states"), std::string::npos) << e.what();
  }
}

TEST(RngStateTest, RestoreRepeatsCudaDraws) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(11);  // seeds the CPU and every CUDA generator
  const RngState saved = capture_rng_state();
  ASSERT_EQ(static_cast<int64_t>(saved.cuda.size()), torch::cuda::device_count());
  std::vector<at::Tensor> first;
  for (int64_t i = 0; i < torch::cuda::device_count(); ++i) {
    first.push_back(draw(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))));
  }
  const at::Tensor cpu_first = draw();
  restore_rng_state(saved);
  for (int64_t i = 0; i < torch::cuda::device_count(); ++i) {
    EXPECT_TRUE(
        torch::equal(draw(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))), first[i]))
        << "cuda:" << i;
  }
  EXPECT_TRUE(torch::equal(draw(), cpu_first));
}

}  // namespace
}  // namespace brrr
