// A project outside the brrr tree: uses the installed headers and brrr::brrr.
#include <iostream>

#include "core/config.h"

int main() {
  const brrr::ExperimentConfig config =
      brrr::parse_config("model: {name: mlp}\ndata: {dataset: fashion_mnist}\ntrain: {max_steps: 7}\n");
  std::cout << "train.max_steps=" << config.train.max_steps << "\n";
  return 0;
}
