// image_input's CUDA kernels (see image_input.h for the op).
//
// The op reads 1 byte and writes 2-8 bytes per element and does two flops, so it is bound by
// memory: the launch shapes below exist to make both sides wide (8- and 16-byte accesses) and
// coalesced. 256 threads a block everywhere, int64 indices, grid-stride loops.
//
//   ChannelsLast (NHWC), C > 1: a block owns a tile of kTilePixels = 2048 consecutive pixels of
//     the B*H*W pixel range, kPixels = 8 a thread (one image each, as hw % 8 == 0). A thread reads
//     its 8 bytes of each of the C input planes with one 8-byte load (a warp reads 256 consecutive
//     bytes of a plane) and writes its 8*C interleaved outputs into shared memory; the block then
//     copies the tile, 2048*C outputs contiguous in NHWC, out with 16-byte stores, consecutive
//     threads on consecutive 16 bytes. The shared-memory hop is the transpose: without it a warp's
//     store would cover every 48th 16 bytes (C = 3, bf16) and move each 32-byte sector twice.
//     C = 3 is specialised (outputs packed in registers, 16-byte stores to shared memory); other C
//     store element by element to shared memory. One wave: 8 blocks an SM.
//   Contiguous (NCHW), and C = 1 (its NHWC layout is NCHW): y over the B*C planes, so a plane's
//     channel and constants are read once and no index is divided; x over the plane's 8-pixel
//     vectors: one 8-byte load and 8 outputs stored 16 bytes at a time per thread.
//   Fallback (hw % 8 != 0, a pointer not aligned for those accesses, or a tile larger than 48 KiB
//     of shared memory): one thread per output element, indices by division, at most 16 blocks
//     per SM of work a wave.
//
// Measured on an H200 (B = 256, C = 3, 224 x 224, bf16): NHWC 34 us and NCHW 33 us, 3.4-3.5 TB/s
// of the 3.8 TB/s a device copy of the same bytes moves (the one-thread-an-element kernel: 169 us).
//
// Invariant: every path computes __fadd_rn(__fmul_rn(v, scale[c]), shift[c]) in float (two
// roundings, no FMA) and rounds once to out_t, so each equals the ATen reference bit for bit.
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

#include <algorithm>

#include "core/ops/image_input.h"
#include "core/ops/kernel_utils.cuh"

namespace brrr::detail {

namespace {

constexpr int kThreads = 256;
constexpr int kPixels = 8;  // pixels a thread on the vector paths: one 8-byte load a plane
constexpr int kTilePixels = kThreads * kPixels;
constexpr size_t kMaxTileBytes = 48 * 1024;  // shared memory a block gets without opting in

template <typename out_t>
__device__ __forceinline__ out_t normalize(uint8_t v, float scale, float shift) {
  return static_cast<out_t>(__fadd_rn(__fmul_rn(static_cast<float>(v), scale), shift));
}

// Vector path for NHWC output. kC: the channel count when specialised, 0 for `channels` at run
// time. Requires hw % kPixels == 0, x 8-byte and out 16-byte aligned; dynamic shared memory of
// kTilePixels * channels * sizeof(out_t) bytes.
template <typename out_t, int kC>
__global__ void __launch_bounds__(kThreads)
    image_input_nhwc_kernel(const uint8_t* __restrict__ x,    // (B, C, H, W)
                            const float* __restrict__ scale,  // (C,) or (1,)
                            const float* __restrict__ shift,  // same
                            out_t* __restrict__ out,          // (B, H, W, C)
                            int64_t npix, int64_t channels, int64_t hw, int64_t param_stride) {
  constexpr int kV = kVec16<out_t>;  // outputs a 16-byte access; divides kPixels
  extern __shared__ __align__(16) unsigned char smem[];
  out_t* tile = reinterpret_cast<out_t*>(smem);  // (kTilePixels, C): the tile's NHWC outputs
  const int64_t c_count = kC > 0 ? kC : channels;
  pdl_begin();

  const int64_t tiles = (npix + kTilePixels - 1) / kTilePixels;
  for (int64_t tile_idx = blockIdx.x; tile_idx < tiles; tile_idx += gridDim.x) {
    const int64_t q0 = tile_idx * kTilePixels;  // the tile's first pixel
    const int64_t q = q0 + static_cast<int64_t>(threadIdx.x) * kPixels;
    if (q < npix) {
      const int64_t b = q / hw;
      const uint8_t* src = x + b * c_count * hw + (q - b * hw);  // plane 0, this thread's pixels
      out_t* mine = tile + threadIdx.x * kPixels * c_count;
      if constexpr (kC > 0) {
        out_t v[kPixels * kC];  // NHWC order
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const Vec<uint8_t, kPixels> in = load_vec<uint8_t, kPixels>(src + c * hw);
          const float sc = scale[c * param_stride], sh = shift[c * param_stride];
#pragma unroll
          for (int k = 0; k < kPixels; ++k) v[k * kC + c] = normalize<out_t>(in.v[k], sc, sh);
        }
#pragma unroll
        for (int j = 0; j < kPixels * kC / kV; ++j) {
          Vec<out_t, kV> piece;
#pragma unroll
          for (int i = 0; i < kV; ++i) piece.v[i] = v[j * kV + i];
          store_vec<out_t, kV>(mine + j * kV, piece);
        }
      } else {
        for (int64_t c = 0; c < c_count; ++c) {
          const Vec<uint8_t, kPixels> in = load_vec<uint8_t, kPixels>(src + c * hw);
          const float sc = scale[c * param_stride], sh = shift[c * param_stride];
#pragma unroll
          for (int k = 0; k < kPixels; ++k)
            mine[k * c_count + c] = normalize<out_t>(in.v[k], sc, sh);
        }
      }
    }
    __syncthreads();
    // The tile's valid pixels are a multiple of kPixels, so its outputs fill whole 16-byte pieces.
    const int64_t pieces = std::min<int64_t>(kTilePixels, npix - q0) * c_count / kV;
    out_t* dst = out + q0 * c_count;
    for (int64_t j = threadIdx.x; j < pieces; j += kThreads) {
      store_vec<out_t, kV>(dst + j * kV, load_vec<out_t, kV>(tile + j * kV));
    }
    __syncthreads();  // the tile is rewritten next iteration
  }
}

// Vector path for NCHW output: blockIdx.y walks the planes, x the plane's kPixels-vectors.
// Requires hw % kPixels == 0, x 8-byte and out 16-byte aligned.
template <typename out_t>
__global__ void __launch_bounds__(kThreads)
    image_input_nchw_kernel(const uint8_t* __restrict__ x,    // (B, C, H, W)
                            const float* __restrict__ scale,  // (C,) or (1,)
                            const float* __restrict__ shift,  // same
                            out_t* __restrict__ out,          // (B, C, H, W)
                            int64_t planes, int64_t channels, int64_t hw, int64_t param_stride) {
  pdl_begin();
  const int64_t vecs = hw / kPixels;  // per plane
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int64_t c = plane % channels;
    const float sc = scale[c * param_stride], sh = shift[c * param_stride];
    // plane * vecs * kPixels (= plane * hw) shows the compiler that the offsets are multiples of
    // kPixels; from plane * hw it splits the bf16/fp16 16-byte stores into 4-byte ones.
    const int64_t base = plane * vecs * kPixels;
    const uint8_t* src = x + base;
    out_t* dst = out + base;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < vecs;
         i += stride) {
      const Vec<uint8_t, kPixels> in = load_vec<uint8_t, kPixels>(src + i * kPixels);
      Vec<out_t, kPixels> v;
#pragma unroll
      for (int k = 0; k < kPixels; ++k) v.v[k] = normalize<out_t>(in.v[k], sc, sh);
      store_vec<out_t, kPixels>(dst + i * kPixels, v);
    }
  }
}

// Fallback for any shape and alignment: one thread per output element.
template <typename out_t, bool kChannelsLast>
__global__ void __launch_bounds__(kThreads)
    image_input_element_kernel(const uint8_t* __restrict__ x,    // (B, C, H, W)
                               const float* __restrict__ scale,  // (C,) or (1,)
                               const float* __restrict__ shift,  // same
                               out_t* __restrict__ out,          // NCHW or NHWC
                               int64_t n, int64_t channels, int64_t hw, int64_t param_stride) {
  pdl_begin();
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
    out[i] = normalize<out_t>(x[(b * channels + c) * hw + p], scale[c * param_stride],
                              shift[c * param_stride]);
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
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // With one channel the NHWC layout is the NCHW one.
  const bool channels_last = memory_format == at::MemoryFormat::ChannelsLast && channels > 1;
  const bool vector_shape =
      hw % kPixels == 0 && is_aligned(x.data_ptr(), kPixels) && is_aligned(out.data_ptr(), 16);
  const uint8_t* xp = x.data_ptr<uint8_t>();
  const float* scale_p = scale.data_ptr<float>();
  const float* shift_p = shift.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "image_input_cuda", [&] {
    scalar_t* outp = out.data_ptr<scalar_t>();
    const size_t tile_bytes = kTilePixels * static_cast<size_t>(channels) * sizeof(scalar_t);
    if (channels_last && vector_shape && tile_bytes <= kMaxTileBytes) {
      const int64_t npix = n / channels;
      const int64_t blocks = std::min((npix + kTilePixels - 1) / kTilePixels, sms * 8);
      auto launch = [&](auto kernel) {
        launch_dependent(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), tile_bytes,
                         stream, xp, scale_p, shift_p, outp, npix, channels, hw, param_stride);
      };
      if (channels == 3) {
        launch(image_input_nhwc_kernel<scalar_t, 3>);
      } else {
        launch(image_input_nhwc_kernel<scalar_t, 0>);
      }
    } else if (!channels_last && vector_shape) {
      const int64_t planes = n / hw;
      const int64_t gx = std::min((hw / kPixels + kThreads - 1) / kThreads, sms * 16);
      const int64_t gy = std::min<int64_t>(planes, 65535);
      launch_dependent(image_input_nchw_kernel<scalar_t>,
                       dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(kThreads),
                       0, stream, xp, scale_p, shift_p, outp, planes, channels, hw, param_stride);
    } else {
      const int64_t blocks = std::min((n + kThreads - 1) / kThreads, sms * 16);
      auto launch = [&](auto kernel) {
        launch_dependent(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, xp,
                         scale_p, shift_p, outp, n, channels, hw, param_stride);
      };
      if (channels_last) {
        launch(image_input_element_kernel<scalar_t, true>);
      } else {
        launch(image_input_element_kernel<scalar_t, false>);
      }
    }
  });
  return out;
}

bool image_input_cuda_built() {
  return true;
}

}  // namespace brrr::detail
