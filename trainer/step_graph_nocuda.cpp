// StepGraph in a build without CUDA: there is nothing to capture on. decide_cuda_graph keeps the
// trainer from asking; a direct use is an error.
#include "core/error.h"
#include "trainer/step_graph.h"

namespace brrr {

struct StepGraph::Impl {};

bool StepGraph::available() {
  return false;
}

StepGraph::StepGraph(c10::Device device) : device_(device) {
  throw Error("StepGraph: this brrr was built without CUDA, so no step can be captured (device " +
              device_.str() + ")");
}

StepGraph::~StepGraph() = default;

void StepGraph::reset() {
  inputs_.clear();
  signature_.clear();
  captured_ = false;
}

void StepGraph::run_on_capture_stream(const std::function<void()>& fn) {
  fn();
}

std::optional<std::string> StepGraph::capture(const std::vector<Batch>& /*micro_batches*/,
                                              const Body& /*body*/) {
  return std::string("this brrr was built without CUDA");
}

void StepGraph::replay(const std::vector<Batch>& /*micro_batches*/) {
  throw Error("StepGraph::replay: this brrr was built without CUDA");
}

}  // namespace brrr
