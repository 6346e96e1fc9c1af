#pragma once
// Building a model from `model:` options by name: brrr's own models (an explicit table in
// registry.cpp, not static initialisers, which a static library would silently drop) and those a
// program registers at run time with register_model(), which `model.name` in YAML then names.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "models/model.h"

namespace brrr {

/// Builds a model from its options: the shared `model.*` keys and, for its own settings,
/// `options.options` (model.options in YAML, read with get_int/get_double/...).
using ModelFactory = std::function<std::shared_ptr<Model>(const ModelOptions& options)>;

/// Makes `name` a valid `model.name`. Call it before the config's model is built (in main(),
/// before brrr::run_cli or Trainer::fit). Throws std::invalid_argument when `name` is empty, is
/// one of brrr's models, or is registered already, or when `factory` is empty. Thread-safe.
void register_model(const std::string& name, ModelFactory factory);

/// Builds the model `options.name` (on CPU, in train mode, freshly initialised from the current
/// libtorch RNG state — seed it first for reproducible weights).
/// Throws ConfigError naming `model.name` and the valid names when the name is unknown, the
/// offending `model.*` key when an option is invalid for that model, and a `model.options.*` key
/// that the model's factory did not read (with where it was set).
std::shared_ptr<Model> make_model(const ModelOptions& options);

/// brrr's models in table order (mlp, convnet, resnet18, resnet50, gpt), then the registered
/// ones in the order they were registered.
std::vector<std::string> model_names();

}  // namespace brrr
