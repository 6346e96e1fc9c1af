#pragma once
// Resolves `run.device` (auto | cpu | cuda | cuda:N) to a c10::Device.
#include <c10/core/Device.h>

#include <string>

namespace brrr {

/// `auto` picks cuda:0 when CUDA is available, else CPU. Throws ConfigError (key `run.device`)
/// for malformed names, or when CUDA is requested but unavailable / the index is out of range.
c10::Device resolve_device(const std::string& name);

/// Human-readable device name ("NVIDIA H200", "CPU (2 threads)").
std::string device_name(const c10::Device& device);

/// True when the device has tensor cores for bf16/tf32 (CUDA compute capability >= 8.0).
bool has_tensor_cores(const c10::Device& device);

}  // namespace brrr
