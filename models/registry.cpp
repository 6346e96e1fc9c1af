#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "models/convnet.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/resnet.h"

namespace brrr {
namespace {

using Factory = std::shared_ptr<Model> (*)(const ModelOptions&);

struct Entry {
  const char* name;
  Factory make;
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

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : kModels) names.emplace_back(entry.name);
  return names;
}

std::shared_ptr<Model> make_model(const ModelOptions& options) {
  for (const auto& entry : kModels) {
    if (options.name == entry.name) return entry.make(options);
  }
  throw ConfigError(fmt::format("model.name: unknown model '{}'; valid names: {}", options.name,
                                fmt::join(model_names(), ", ")));
}

}  // namespace brrr
