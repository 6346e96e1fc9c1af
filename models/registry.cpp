#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

#include "core/error.h"
#include "core/name_registry.h"
#include "models/convnet.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/resnet.h"

namespace brrr {
namespace {

using BuiltIn = std::shared_ptr<Model> (*)(const ModelOptions&);

struct Entry {
  const char* name;
  BuiltIn make;
};

const Entry kModels[] = {
    {"mlp",
     [](const ModelOptions& o) -> std::shared_ptr<Model> { return std::make_shared<Mlp>(o); }},
    {"convnet",
     [](const ModelOptions& o) -> std::shared_ptr<Model> { return std::make_shared<ConvNet>(o); }},
    {"resnet18",
     [](const ModelOptions& o) -> std::shared_ptr<Model> {
       return std::make_shared<ResNet>(o, 18);
     }},
    {"resnet50",
     [](const ModelOptions& o) -> std::shared_ptr<Model> {
       return std::make_shared<ResNet>(o, 50);
     }},
    {"gpt",
     [](const ModelOptions& o) -> std::shared_ptr<Model> { return std::make_shared<Gpt>(o); }},
};

const Entry* built_in(const std::string& name) {
  for (const auto& entry : kModels) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

NameRegistry<ModelFactory>& registry() {
  static NameRegistry<ModelFactory> r("model", [] {
    std::vector<std::string> names;
    for (const auto& entry : kModels) names.emplace_back(entry.name);
    return names;
  }());
  return r;
}

}  // namespace

void register_model(const std::string& name, ModelFactory factory) {
  registry().add(name, std::move(factory));
}

std::vector<std::string> model_names() {
  return registry().names();
}

std::shared_ptr<Model> make_model(const ModelOptions& options) {
  std::shared_ptr<Model> model;
  if (const Entry* entry = built_in(options.name)) {
    model = entry->make(options);
  } else {
    const ModelFactory factory = registry().find(options.name);
    if (!factory) {
      throw ConfigError("model.name: " +
                        unknown_name_message("model", options.name, model_names()));
    }
    model = factory(options);  // outside the lock: a factory may build other models
    if (!model) {
      throw Error(fmt::format("the factory of model '{}' returned no model", options.name));
    }
  }
  options.options.check_all_read(fmt::format("model '{}'", options.name));
  return model;
}

}  // namespace brrr
