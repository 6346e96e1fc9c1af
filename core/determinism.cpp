#include "core/determinism.h"

#include <ATen/Context.h>

#include <cstdlib>

#include "core/log.h"

namespace brrr {

void set_deterministic(bool enabled) {
  // Read when cuBLAS sets up a stream's handle and checked by ATen at each matmul in this mode;
  // overwrite=0 keeps a value the user chose.
  if (enabled) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(enabled, /*warn_only=*/false);
  context.setDeterministicCuDNN(enabled);
  if (enabled) {
    context.setDeterministicFillUninitializedMemory(false);
    context.setBenchmarkCuDNN(false);
  }
  log::debug("determinism: deterministic algorithms {}", enabled ? "only" : "not required");
}

bool deterministic() {
  return at::globalContext().deterministicAlgorithms();
}

}  // namespace brrr
