// set_deterministic (train.deterministic): the process-wide switches it turns, the cuBLAS
// workspace setting it makes unless the environment has one, that off undoes it, and the scope.
#include "core/determinism.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace brrr {
namespace {

const char* workspace_config() {
  return std::getenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST(DeterminismTest, OnTurnsEverySwitchAndOffTurnsThemBack) {
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
  auto& context = at::globalContext();
  context.setBenchmarkCuDNN(true);
  set_deterministic(true);
  EXPECT_TRUE(deterministic());
  EXPECT_TRUE(context.deterministicAlgorithms());
  EXPECT_FALSE(context.deterministicAlgorithmsWarnOnly());  // an op without one raises
  EXPECT_TRUE(context.deterministicCuDNN());
  EXPECT_FALSE(context.benchmarkCuDNN());
  EXPECT_FALSE(context.deterministicFillUninitializedMemory());
  ASSERT_NE(workspace_config(), nullptr);
  EXPECT_EQ(std::string(workspace_config()), ":4096:8");
  set_deterministic(false);
  EXPECT_FALSE(deterministic());
  EXPECT_FALSE(context.deterministicAlgorithms());
  EXPECT_FALSE(context.deterministicCuDNN());
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST(DeterminismTest, KeepsTheWorkspaceSettingTheEnvironmentChose) {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  set_deterministic(true);
  EXPECT_EQ(std::string(workspace_config()), ":16:8");
  set_deterministic(false);
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST(DeterminismTest, OffLeavesTheWorkspaceSettingAlone) {
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
  set_deterministic(false);
  EXPECT_EQ(workspace_config(), nullptr);
}

TEST(DeterminismTest, ScopeSetsItAndPutsBackWhatWasBefore) {
  ASSERT_FALSE(deterministic());
  {
    const DeterministicScope on;
    EXPECT_TRUE(deterministic());
    {
      const DeterministicScope off(false);
      EXPECT_FALSE(deterministic());
    }
    EXPECT_TRUE(deterministic());  // the outer scope's, not off
  }
  EXPECT_FALSE(deterministic());
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

}  // namespace
}  // namespace brrr
