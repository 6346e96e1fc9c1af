#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <mutex>
#include <stdexcept>
#include <utility>

#include "core/error.h"
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

// The models a program registered, in registration order.
struct Registered {
  std::mutex mutex;
  std::vector<std::pair<std::string, ModelFactory>> entries;
};

Registered& registered() {
  static Registered r;
  return r;
}

const Entry* built_in(const std::string& name) {
  for (const auto& entry : kModels) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

}  // namespace

void register_model(const std::string& name, ModelFactory factory) {
  if (name.empty()) throw std::invalid_argument("register_model: the name is empty");
  if (!factory) throw std::invalid_argument("register_model('" + name + "'): no factory");
  if (built_in(name) != nullptr) {
    throw std::invalid_argument("register_model('" + name + "'): brrr has a model of that name");
  }
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& entry : r.entries) {
    if (entry.first == name) {
      throw std::invalid_argument("register_model('" + name + "'): registered already");
    }
  }
  r.entries.emplace_back(name, std::move(factory));
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : kModels) names.emplace_back(entry.name);
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& entry : r.entries) names.push_back(entry.first);
  return names;
}

std::shared_ptr<Model> make_model(const ModelOptions& options) {
  std::shared_ptr<Model> model;
  if (const Entry* entry = built_in(options.name)) {
    model = entry->make(options);
  } else {
    ModelFactory factory;
    {
      Registered& r = registered();
      std::lock_guard<std::mutex> lock(r.mutex);
      for (const auto& e : r.entries) {
        if (e.first == options.name) factory = e.second;
      }
    }
    if (!factory) {
      throw ConfigError(fmt::format("model.name: unknown model '{}'; valid names: {}",
                                    options.name, fmt::join(model_names(), ", ")));
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
