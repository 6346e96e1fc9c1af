#pragma once
// Building a model from `model:` options by name. The table is explicit (registry.cpp), not filled
// by static initialisers, which a static library would silently drop.
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "models/model.h"

namespace brrr {

/// Builds the model `options.name` (on CPU, in train mode, freshly initialised from the current
/// libtorch RNG state — seed it first for reproducible weights).
/// Throws ConfigError naming `model.name` and the valid names when the name is unknown, or the
/// offending `model.*` key when an option is invalid for that model.
std::shared_ptr<Model> make_model(const ModelOptions& options);

/// The registered names, in table order: mlp, convnet, resnet18, resnet50, gpt.
std::vector<std::string> model_names();

}  // namespace brrr
