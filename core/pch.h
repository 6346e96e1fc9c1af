#pragma once
// Precompiled for every target (CMake `target_precompile_headers`): the heavy, stable headers.
// Never include this file directly.
#include <torch/torch.h>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <string>
#include <vector>
