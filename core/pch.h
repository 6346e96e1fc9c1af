#pragma once
// Precompiled for every target (CMake `target_precompile_headers`): the heavy, stable headers.
// Never include this file directly.
#include <fmt/format.h>
#include <torch/torch.h>
#include <map>
#include <memory>
#include <string>
#include <vector>
