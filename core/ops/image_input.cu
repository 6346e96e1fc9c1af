// image_input's CUDA kernel (see image_input.h for the op).
//
// Launch shape: one thread per output element, grid-stride, 256 threads a block, at most 16
// blocks per SM's worth of work a wave. The op moves 1 byte in and 2-4 bytes out per element and
// does two flops, so it is bound by memory: writes are coalesced in the output's layout; reads of
// the NCHW uint8 input are coalesced for Contiguous output and, for ChannelsLast, consecutive
// threads read C interleaved planes (C = 3 streams of bytes, served by L1/L2).
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

#include "core/ops/image_input.h"

namespace brrr::detail {

namespace {

constexpr int kThreads = 256;

template <typename out_t, bool kChannelsLast>
__global__ void image_input_kernel(const uint8_t* __restrict__ x,    // (B, C, H, W)
                                   const float* __restrict__ scale,  // (C,) or (1,)
                                   const float* __restrict__ shift,  // same
                                   out_t* __restrict__ out,          // NCHW or NHWC
                                   int64_t n, int64_t channels, int64_t hw, int64_t param_stride) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    int64_t b, c, p;  // batch, channel, pixel of output element i
    if constexpr (kChannelsLast) {
      c = i % channels;
      const int64_t bp = i / channels;
      p = bp % hw;
      b = bp / hw;
    } else {
      p = i % hw;
      const int64_t bc = i / hw;
      c = bc % channels;
      b = bc / channels;
    }
    const float v = static_cast<float>(x[(b * channels + c) * hw + p]);
    // Two roundings (no FMA), as the ATen reference: bit-identical results.
    out[i] = static_cast<out_t>(
        __fadd_rn(__fmul_rn(v, scale[c * param_stride]), shift[c * param_stride]));
  }
}

}  // namespace

at::Tensor image_input_cuda(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                            at::ScalarType dtype, at::MemoryFormat memory_format) {
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(dtype).memory_format(memory_format));
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t channels = x.size(1);
  const int64_t hw = x.size(2) * x.size(3);
  const int64_t param_stride = scale.size(0) == 1 ? 0 : 1;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{sms} * 16);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const bool channels_last = memory_format == at::MemoryFormat::ChannelsLast;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "image_input_cuda", [&] {
    auto launch = [&](auto kernel) {
      kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          x.data_ptr<uint8_t>(), scale.data_ptr<float>(), shift.data_ptr<float>(),
          out.data_ptr<scalar_t>(), n, channels, hw, param_stride);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (channels_last) {
      launch(image_input_kernel<scalar_t, true>);
    } else {
      launch(image_input_kernel<scalar_t, false>);
    }
  });
  return out;
}

bool image_input_cuda_built() {
  return true;
}

}  // namespace brrr::detail
