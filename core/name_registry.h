#pragma once
// NameRegistry: the values a naming config key may take (model.name, data.dataset) — brrr's own
// names, fixed at build time, and those a program registers at run time, each with its factory.
//
// Invariants: a name is registered at most once and never shadows a built-in one; registration
// and lookup are thread-safe (the duplicate check and the insertion happen under one lock); the
// names are listed built-in first, then in registration order.
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace brrr {

/// The one wording of a name that no registry knows: "unknown model 'x'; valid names: a, b".
inline std::string unknown_name_message(const std::string& kind, const std::string& name,
                                        const std::vector<std::string>& valid) {
  std::string out = "unknown " + kind + " '" + name + "'; valid names: ";
  for (size_t i = 0; i < valid.size(); ++i) out += (i > 0 ? ", " : "") + valid[i];
  return out;
}

template <typename Factory>
class NameRegistry {
 public:
  /// `kind` names what is registered in messages ("model" gives "register_model('x'): ...");
  /// `built_in` are brrr's own names.
  NameRegistry(std::string kind, std::vector<std::string> built_in)
      : kind_(std::move(kind)), built_in_(std::move(built_in)) {}

  /// Throws std::invalid_argument when `name` is empty, one of brrr's, or registered already,
  /// or when `factory` is empty.
  void add(const std::string& name, Factory factory) {
    const std::string who = "register_" + kind_ + "('" + name + "')";
    if (name.empty()) throw std::invalid_argument("register_" + kind_ + ": the name is empty");
    if (!factory) throw std::invalid_argument(who + ": no factory");
    if (is_built_in(name))
      throw std::invalid_argument(who + ": brrr has a " + kind_ + " of that name");
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_) {
      if (entry.first == name) throw std::invalid_argument(who + ": registered already");
    }
    entries_.emplace_back(name, std::move(factory));
  }

  /// The factory registered as `name`; an empty one when there is none.
  Factory find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_) {
      if (entry.first == name) return entry.second;
    }
    return Factory();
  }

  bool is_built_in(const std::string& name) const {
    for (const auto& b : built_in_) {
      if (b == name) return true;
    }
    return false;
  }

  /// brrr's names, then the registered ones in registration order.
  std::vector<std::string> names() const {
    std::vector<std::string> out = built_in_;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_) out.push_back(entry.first);
    return out;
  }

 private:
  std::string kind_;
  std::vector<std::string> built_in_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, Factory>> entries_;
};

}  // namespace brrr
