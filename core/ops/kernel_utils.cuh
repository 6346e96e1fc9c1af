#pragma once
// Device helpers shared by the fused ops' kernels (included by .cu files only): aligned vectors
// for 16-byte loads and stores, the float accumulator type of each element type, and warp sums.
//
// Invariant: every reduction here combines values in an order fixed by the launch shape alone (no
// atomics), so a kernel built on them gives the same bits on every run with the same shapes on
// the same device.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/macros/Macros.h>
#include <cuda_runtime.h>

#include <ATen/OpMathType.h>

#include <cfloat>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace brrr::detail {

constexpr int kWarpSize = 32;

/// kN elements of T, aligned so that one load or store of it is a single kN * sizeof(T)-byte
/// access (16 bytes for kN = kVec16<T>). The pointer must be aligned to that size.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Vec {
  T v[kN];
};

/// Elements of T in one 16-byte access: 8 bf16/fp16, 4 float, 2 double.
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

/// Accumulator type: float for bf16/fp16/float, double for double.
template <typename T>
using acc_type = at::opmath_type<T>;

namespace vec_detail {
// The integer type that moves kBytes (2, 4 or 8) in one access; wider vectors move in 16-byte
// uint4 pieces. Copying through integers, not through the element class, is what makes the
// compiler emit one wide store (a Vec of c10::BFloat16 is otherwise copied member by member).
template <int kBytes>
struct Word;
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<8> {
  using type = uint2;
};
}  // namespace vec_detail

template <typename T, int kN>
__device__ __forceinline__ Vec<T, kN> load_vec(const T* p) {
  constexpr int kBytes = static_cast<int>(sizeof(T)) * kN;
  Vec<T, kN> v;
  if constexpr (kBytes % 16 == 0) {
    uint4 raw[kBytes / 16];
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) raw[c] = reinterpret_cast<const uint4*>(p)[c];
    memcpy(&v, raw, kBytes);
  } else {
    using W = typename vec_detail::Word<kBytes>::type;
    const W raw = *reinterpret_cast<const W*>(p);
    memcpy(&v, &raw, kBytes);
  }
  return v;
}

template <typename T, int kN>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, kN>& v) {
  constexpr int kBytes = static_cast<int>(sizeof(T)) * kN;
  if constexpr (kBytes % 16 == 0) {
    uint4 raw[kBytes / 16];
    memcpy(raw, &v, kBytes);
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) reinterpret_cast<uint4*>(p)[c] = raw[c];
  } else {
    using W = typename vec_detail::Word<kBytes>::type;
    W raw;
    memcpy(&raw, &v, kBytes);
    *reinterpret_cast<W*>(p) = raw;
  }
}

/// The most negative finite value: a start for running maxima that keeps exp(m - m') finite
/// arithmetic (exp(-inf - -inf) would be NaN).
template <typename T>
__device__ __forceinline__ T lowest();
template <>
__device__ __forceinline__ float lowest<float>() {
  return -FLT_MAX;
}
template <>
__device__ __forceinline__ double lowest<double>() {
  return -DBL_MAX;
}

/// Sum over the 32 lanes of a warp by butterfly shuffles; every lane gets the total.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

/// Whether `kernel` runs code built for sm_90 or later on `device` (asked once a kernel and
/// device): false on a GPU before sm_90, and where the build's newest code for the GPU is older
/// PTX, JIT-compiled without its sm_90 parts (clusters, griddepcontrol).
inline bool runs_sm90_code(const void* kernel, int device) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, device);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  cudaFuncAttributes attrs{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
  return known[key] =
             at::cuda::getDeviceProperties(device)->major >= 9 && attrs.binaryVersion >= 90;
}

/// Programmatic dependent launch (sm_90 and later). Every kernel of the fused ops is launched as a
/// dependent launch (launch_dependent below, or column_sum's cluster launch) and starts with
/// pdl_begin(): it waits until the kernel before it has finished and its writes are visible, then
/// lets a dependent launch after it start once all its blocks got that far. So its launch, block
/// placement and start-up proceed while the kernel before it runs (a cuBLAS GEMM, mostly, in
/// GPT's step), and the next kernel's while it runs. Nothing reads or writes global memory before
/// pdl_begin(), and no block leaves before it: the kernel finishes only after the one before it,
/// so a plain launch after it (an ATen kernel, a copy, an event) still sees everything before it
/// done. The wait comes before the trigger: triggered at the start, a chain of dependent launches
/// (column sum, sum_partials, column sum, ...) runs ahead, each placing its blocks while the one
/// before it still waits, and the waiting blocks hold the SMs' shared memory and warps from the
/// kernel that runs (measured: 10-22 us more per call of a LayerNorm backward and its sum,
/// bench/RESULTS.md section 6, update 13). After the wait, at most the next kernel is placed
/// early. (column_sum's one-launch cluster kernel sets up its mbarriers before it.) A no-op
/// before sm_90; the wait returns at once when the launch did not ask for the overlap. The launch
/// asks for it only where the kernel runs its sm_90 code: a kernel JIT-compiled from older PTX
/// has no wait, and the overlap would be a race.
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// The launch attribute that makes a launch a programmatic dependent one (see pdl_begin); only
/// for a kernel that runs its sm_90 code.
inline cudaLaunchAttribute programmatic_serialization() {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  return overlap;
}

/// Host side: kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent launch
/// where the kernel runs its sm_90 code (see pdl_begin), a plain launch elsewhere; checked.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute overlap = programmatic_serialization();
  if (runs_sm90_code(reinterpret_cast<const void*>(kernel), c10::cuda::current_device())) {
    config.attrs = &overlap;
    config.numAttrs = 1;
  }
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

/// Where the second stage of a two-stage column sum writes: column c goes to
/// ptr[c / segment][c % segment], so one launch fills up to three outputs whose partials lie side
/// by side in each part's row (a LayerNorm's dweight and dbias, and the bias gradient of the
/// linear before it).
template <typename out_t>
struct SumOutputs {
  out_t* ptr[3];
  int64_t segment;
};

/// The second stage of a two-stage column sum: total[c] = sum over b < nparts of
/// partial[b * stride + c], for c < ncols, in the order the launch shape fixes, written as
/// SumOutputs says.
/// Launch shape: blocks of (kSumCols, kSumLanes) threads, grid ceil(ncols / kSumCols); thread
/// (tx, ty) adds parts ty, ty + kSumLanes, ... of column blockIdx.x * kSumCols + tx (a warp reads
/// 32 consecutive columns of one part: coalesced), then the kSumLanes sums are added in order.
/// 32 lanes a column, each with its loads unrolled: the partials (a few hundred rows, written
/// just before, in L2) are a chain of dependent-latency round trips otherwise, a few
/// microseconds for each of a few dozen blocks on an idle GPU.
constexpr int kSumCols = 32;
constexpr int kSumLanes = 32;

template <typename acc_t, typename out_t>
__global__ void __launch_bounds__(kSumCols* kSumLanes)
    sum_partials_kernel(const acc_t* __restrict__ partial, SumOutputs<out_t> outs, int64_t nparts,
                        int64_t ncols, int64_t stride) {
  __shared__ acc_t lane_sum[kSumLanes][kSumCols];
  pdl_begin();  // the partials are complete from here on
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kSumCols + threadIdx.x;
  acc_t t = 0;
  if (c < ncols) {
#pragma unroll 4
    for (int64_t b = threadIdx.y; b < nparts; b += kSumLanes) t += partial[b * stride + c];
  }
  lane_sum[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < ncols) {
    acc_t total = 0;
#pragma unroll
    for (int l = 0; l < kSumLanes; ++l) total += lane_sum[l][threadIdx.x];
    const int64_t s = c / outs.segment;
    outs.ptr[s][c - s * outs.segment] = static_cast<out_t>(total);
  }
}

/// Host side: launches sum_partials_kernel on `stream` (a launch of ceil(ncols / 32) blocks),
/// ncols = outs.segment times the number of outputs.
template <typename acc_t, typename out_t>
void launch_sum_partials(const acc_t* partial, SumOutputs<out_t> outs, int64_t nparts,
                         int64_t ncols, int64_t stride, cudaStream_t stream) {
  launch_dependent(sum_partials_kernel<acc_t, out_t>,
                   dim3(static_cast<unsigned>((ncols + kSumCols - 1) / kSumCols)),
                   dim3(kSumCols, kSumLanes), 0, stream, partial, outs, nparts, ncols, stride);
}

/// The same into one output of ncols columns.
template <typename acc_t, typename out_t>
void launch_sum_partials(const acc_t* partial, out_t* out, int64_t nparts, int64_t ncols,
                         int64_t stride, cudaStream_t stream) {
  launch_sum_partials(partial, SumOutputs<out_t>{{out, nullptr, nullptr}, ncols}, nparts, ncols,
                      stride, stream);
}

/// Host side: whether p is aligned to `bytes` (a vector path's precondition).
inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace brrr::detail
