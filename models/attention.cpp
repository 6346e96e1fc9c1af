#include "models/attention.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "core/determinism.h"
#include "core/device_info.h"
#include "core/error.h"

namespace brrr {

AttentionBackend parse_attention_backend(const std::string& name) {
  if (name == "auto") return AttentionBackend::kAuto;
  if (name == "flash") return AttentionBackend::kFlash;
  if (name == "cudnn") return AttentionBackend::kCudnn;
  if (name == "efficient") return AttentionBackend::kEfficient;
  if (name == "math") return AttentionBackend::kMath;
  throw ConfigError(fmt::format(
      "model.attention: unknown backend '{}'; valid: auto, flash, cudnn, efficient, math", name));
}

const char* to_string(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::kAuto:
      return "auto";
    case AttentionBackend::kFlash:
      return "flash";
    case AttentionBackend::kCudnn:
      return "cudnn";
    case AttentionBackend::kEfficient:
      return "efficient";
    case AttentionBackend::kMath:
      return "math";
  }
  return "auto";
}

AttentionBackend resolve_attention_backend(AttentionBackend requested, const c10::Device& device,
                                           at::ScalarType dtype) {
  const bool half = dtype == at::kBFloat16 || dtype == at::kHalf;
  if (!device.is_cuda()) return AttentionBackend::kAuto;  // the CPU: ATen chooses
  const bool reproducible = deterministic();
  if (requested == AttentionBackend::kAuto) {
    if (!half) return AttentionBackend::kAuto;
    if (reproducible) return AttentionBackend::kFlash;
    const int index = device.has_index() ? device.index() : 0;
    return detail::cuda_compute_capability_major(index) >= 9 ? AttentionBackend::kCudnn
                                                             : AttentionBackend::kAuto;
  }
  if ((requested == AttentionBackend::kFlash || requested == AttentionBackend::kCudnn) && !half) {
    return AttentionBackend::kAuto;
  }
  if (requested == AttentionBackend::kCudnn && reproducible) {
    throw ConfigError(
        "model.attention: cudnn's backward is not reproducible run to run, and "
        "train.deterministic is true; use auto (flash's deterministic backward), flash, "
        "efficient or math");
  }
  return requested;
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double dropout_p, AttentionBackend backend) {
  const bool grad = q.requires_grad() || k.requires_grad() || v.requires_grad();
  switch (resolve_attention_backend(backend, q.device(), q.scalar_type())) {
    case AttentionBackend::kFlash:
      return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v, dropout_p,
                                                                 /*is_causal=*/true));
    case AttentionBackend::kCudnn:
      return std::get<0>(at::_scaled_dot_product_cudnn_attention(
          q, k, v, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/grad, dropout_p,
          /*is_causal=*/true));
    case AttentionBackend::kEfficient:
      return std::get<0>(at::_scaled_dot_product_efficient_attention(
          q, k, v, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/grad, dropout_p,
          /*is_causal=*/true));
    case AttentionBackend::kMath: {
      // A composite op: under autocast its inner matmuls would be cast while its softmax runs in
      // float, and the backward would then mix dtypes. Autocast wraps SDPA the same way: inputs
      // as they come, the inside excluded from autocast.
      const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
      return std::get<0>(at::_scaled_dot_product_attention_math(q, k, v, /*attn_mask=*/std::nullopt,
                                                                dropout_p, /*is_causal=*/true));
    }
    case AttentionBackend::kAuto:
      break;
  }
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                          /*is_causal=*/true);
}

}  // namespace brrr
