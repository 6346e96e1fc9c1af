#include "core/rng_state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "core/log.h"

namespace brrr {
namespace {

// Device-generic access (no CUDA headers), so this file builds with and without CUDA.
int64_t cuda_device_count() {
  return static_cast<int64_t>(at::getNumGPUs());  // 0 without CUDA
}

at::Generator cuda_generator(int64_t index) {
  return at::globalContext().defaultGenerator(
      c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)));
}

at::Tensor get_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();  // a fresh uint8 CPU tensor owned by the caller
}

void set_state(at::Generator& gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

RngState capture_rng_state() {
  RngState state;
  state.cpu = get_state(at::detail::getDefaultCPUGenerator());
  for (int64_t i = 0; i < cuda_device_count(); ++i)
    state.cuda.push_back(get_state(cuda_generator(i)));
  return state;
}

void restore_rng_state(const RngState& state) {
  if (!state.cpu.defined()) throw CheckpointError("RNG state has no CPU generator state");
  auto cpu = at::detail::getDefaultCPUGenerator();
  set_state(cpu, state.cpu);
  const int64_t devices = cuda_device_count();
  const auto saved = static_cast<int64_t>(state.cuda.size());
  if (saved > devices) {
    log::warn("checkpoint holds RNG states of {} CUDA devices but {} are visible; restoring {}",
              saved, devices, devices);
  }
  for (int64_t i = 0; i < std::min(saved, devices); ++i) {
    auto gen = cuda_generator(i);
    set_state(gen, state.cuda[i]);
  }
}

void save_rng_state(torch::serialize::OutputArchive& archive, const RngState& state,
                    const std::string& key) {
  torch::serialize::OutputArchive nested;
  nested.write("cpu", state.cpu);
  nested.write("cuda_count", c10::IValue(static_cast<int64_t>(state.cuda.size())));
  for (size_t i = 0; i < state.cuda.size(); ++i) {
    nested.write("cuda_" + std::to_string(i), state.cuda[i]);
  }
  archive.write(key, nested);
}

RngState load_rng_state(torch::serialize::InputArchive& archive, const std::string& key) {
  torch::serialize::InputArchive nested;
  if (!archive.try_read(key, nested)) {
    throw CheckpointError(fmt::format("checkpoint has no RNG state (key '{}')", key));
  }
  RngState state;
  c10::IValue count;
  if (!nested.try_read("cpu", state.cpu) || !nested.try_read("cuda_count", count)) {
    throw CheckpointError(fmt::format("RNG state '{}' lacks 'cpu' or 'cuda_count'", key));
  }
  for (int64_t i = 0; i < count.toInt(); ++i) {
    at::Tensor t;
    const std::string name = "cuda_" + std::to_string(i);
    if (!nested.try_read(name, t)) {
      throw CheckpointError(
          fmt::format("RNG state '{}' lacks '{}' (cuda_count {})", key, name, count.toInt()));
    }
    state.cuda.push_back(t);
  }
  return state;
}

}  // namespace brrr
