#include "trainer/observe/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include "core/error.h"
#include "core/log.h"

namespace brrr {
namespace {

using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::set<ActivityType> activities_for(const c10::Device& device) {
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  return activities;
}

}  // namespace

TraceRecorder::TraceRecorder(std::string path, c10::Device device, bool memory)
    : path_(std::move(path)) {
  const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/true,
                              /*profile_memory=*/memory);
  const auto activities = activities_for(device);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  active_ = true;
  log::info("profiler: recording a trace{} to {}", memory ? " with allocations" : "", path_);
}

TraceRecorder::~TraceRecorder() {
  try {
    stop();
  } catch (const std::exception& e) {
    log::error("profiler: could not write {}: {}", path_, e.what());
  }
}

void TraceRecorder::stop() {
  if (!active_) return;
  active_ = false;
  auto result = torch::autograd::profiler::disableProfiler();
  if (!result) throw Error("profiler: the Kineto profiler returned no result (was it enabled?)");
  result->save(path_);
  log::info(
      "profiler: trace written to {} (open it in https://ui.perfetto.dev or chrome://tracing)",
      path_);
}

}  // namespace brrr
