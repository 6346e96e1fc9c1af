#pragma once
#include <string>
// Configs compiled into the binary, so `trainer --config quickstart` works from any directory.

namespace brrr {

/// The YAML text of the built-in config `name` ("quickstart" or "quickstart.yaml"), or nullptr.
const char* embedded_config(const std::string& name);

}  // namespace brrr
