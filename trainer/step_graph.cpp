// StepGraph's device-independent half: what a graph is keyed on. The capture and replay are in
// step_graph_cuda.cpp (or step_graph_nocuda.cpp).
#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include "trainer/step_graph.h"

namespace brrr {

std::string StepGraph::signature(const std::vector<Batch>& micro_batches) {
  std::string parts;
  if (!micro_batches.empty()) {
    for (const auto& [key, tensor] : micro_batches.front()) {
      if (!parts.empty()) parts += ", ";
      parts += fmt::format("{}: ({}) {} {}", key, fmt::join(tensor.sizes(), ", "),
                           c10::toString(tensor.scalar_type()), tensor.device().str());
    }
  }
  std::string out = fmt::format("{} x {{{}}}", micro_batches.size(), parts);
  // Micro-batches of one step usually agree; spell out the ones that do not.
  for (size_t i = 1; i < micro_batches.size(); ++i) {
    if (signature({micro_batches[i]}) != signature({micro_batches.front()})) {
      out += fmt::format("; micro-batch {}: {}", i, signature({micro_batches[i]}));
    }
  }
  return out;
}

bool StepGraph::matches(const std::vector<Batch>& micro_batches) const {
  return captured_ && signature(micro_batches) == signature_;
}

}  // namespace brrr
