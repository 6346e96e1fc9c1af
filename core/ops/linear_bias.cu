// column_sum's CUDA kernels (see linear_bias.h for the op and the launch shapes).
//
// One launch on Hopper (sm_90 and later): clusters of 8 blocks, each cluster owning a slab of
// 4 * kV columns over all rows (a GPT-2 bias gradient, 16384 x 768 bf16: 24 clusters, 192 blocks).
// Each block adds its share of the rows, and the cluster's 64 warp sums meet in rank 0's shared
// memory (stores from the other blocks through distributed shared memory): no partials in global
// memory and no second launch. Launched as a programmatic dependent launch, so that its start-up
// overlaps the end of the kernel before it (0.3-0.5 us of 11.8 a call on an H100).
// Two launches otherwise, dependent launches too (see kernel_utils.cuh): a grid x over slabs of
// 32 * kV columns, y over chunks of rows, sized so that about 4 blocks an SM run at once, writes
// (chunks, C) float partials, and sum_partials_kernel adds them (3 slabs x 176 chunks of 94 rows
// at 16384 x 768 bf16). Bound by memory: the gradient is read once with 16-byte loads.
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

#include <cooperative_groups.h>
#include <cuda/ptx>

#include <algorithm>
#include <map>
#include <mutex>

#include "core/ops/kernel_utils.cuh"
#include "core/ops/linear_bias.h"

namespace brrr::detail {

namespace {

constexpr int kWarps = 8;

// T: the gradient's dtype, kV: columns a lane (kVec16<T>, or 1 on the scalar path).
template <typename T, int kV>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    column_partials_kernel(const T* __restrict__ t,            // (N, C)
                           acc_type<T>* __restrict__ partial,  // (gridDim.y, C)
                           int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  using acc_t = acc_type<T>;
  __shared__ acc_t warp_sums[kWarps][kWarpSize * kV];
  pdl_begin();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kWarpSize + lane) * kV;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = std::min(rows, begin + rows_per_chunk);
  acc_t acc[kV];
#pragma unroll
  for (int k = 0; k < kV; ++k) acc[k] = 0;
  if (col < cols) {  // cols % kV == 0 on the vector path: the lane's kV columns all exist
#pragma unroll 4
    for (int64_t r = begin + warp; r < end; r += kWarps) {
      const Vec<T, kV> v = load_vec<T, kV>(t + r * cols + col);
#pragma unroll
      for (int k = 0; k < kV; ++k) acc[k] += static_cast<acc_t>(v.v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kV; ++k) warp_sums[warp][lane * kV + k] = acc[k];
  __syncthreads();
  // The block's warps added in warp order, one thread a column of the slab.
  for (int i = threadIdx.x; i < kWarpSize * kV; i += kWarps * kWarpSize) {
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpSize * kV + i;
    if (c >= cols) continue;
    acc_t s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += warp_sums[w][i];
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = s;
  }
}

// The one-launch path. A warp's lanes: kRowLanes over rows, 4 over the slab's columns (4 * kV
// columns, 64 bytes of a row); a block's warps and the cluster's blocks interleave over the rows,
// so each thread adds every (kClusterBlocks * kClusterWarps * kRowLanes)-th row of its columns,
// with 8 rows' loads in flight. A warp's row lanes meet by shuffles; then every warp of the
// cluster stores its sums straight into rank 0's shared memory (st.async, each store counted on
// rank 0's mbarrier), and only rank 0 waits: for the bytes, then adds the 64 warp sums of a column
// in a fixed order (a block's 8 warps, then the 8 blocks). The other blocks leave after storing.
constexpr int kClusterBlocks = 8;  // the portable maximum
constexpr int kClusterWarps = 8;
constexpr int kRowLanes = 8;
constexpr int kColLanes = kWarpSize / kRowLanes;

template <typename T, int kV>
__global__ void __launch_bounds__(kClusterWarps* kWarpSize)
    column_sum_cluster_kernel(const T* __restrict__ t,  // (N, C)
                              T* __restrict__ out,      // (C,)
                              int64_t rows, int64_t cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using acc_t = acc_type<T>;
  constexpr int kSlab = kColLanes * kV;
  constexpr int kWarpSums = kClusterBlocks * kClusterWarps;
  constexpr int kStore = 16 / sizeof(acc_t);  // acc_t values of one 16-byte st.async
  static_assert(sizeof(Vec<T, kV>) == sizeof(uint4), "a lane's columns are one 16-byte load");
  static_assert(kV % kStore == 0, "a lane's sums are whole 16-byte stores");
  __shared__ alignas(16) acc_t warp_sums[kWarpSums][kSlab];  // rank 0's are the cluster's
  __shared__ uint64_t landed;  // rank 0's completes when all of warp_sums has arrived
  namespace cg = cooperative_groups;
  namespace ptx = cuda::ptx;
  const cg::cluster_group cluster = cg::this_cluster();
  const auto rank = static_cast<int>(cluster.block_rank());
  if (rank == 0 && threadIdx.x == 0) {
    ptx::mbarrier_init(&landed, 1);
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
  }
  // Waited for only before the stores: by then rank 0 has started and set up its barrier.
  ptx::barrier_cluster_arrive(ptx::sem_relaxed);
  pdl_begin();  // t is complete (and out free to write) from here on
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int row_lane = lane / kColLanes, col_lane = lane % kColLanes;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kSlab + col_lane * kV;
  acc_t acc[kV] = {};
  if (col < cols) {  // cols % kV == 0: the lane's kV columns all exist
    // kUnroll rows' loads issued before any is added: the bytes in flight that keep HBM busy.
    constexpr int kUnroll = 8;
    constexpr int64_t kStep = int64_t{kClusterBlocks} * kClusterWarps * kRowLanes;
    for (int64_t r = (static_cast<int64_t>(rank) * kClusterWarps + warp) * kRowLanes + row_lane;
         r < rows; r += kUnroll * kStep) {
      uint4 raw[kUnroll];  // kV elements of T are 16 bytes
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        raw[u] = r + u * kStep < rows
                     ? *reinterpret_cast<const uint4*>(t + (r + u * kStep) * cols + col)
                     : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        Vec<T, kV> v;
        memcpy(&v, &raw[u], sizeof(v));
#pragma unroll
        for (int k = 0; k < kV; ++k) acc[k] += static_cast<acc_t>(v.v[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    for (int offset = kColLanes; offset < kWarpSize; offset *= 2) {
      acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], offset);
    }
  }
  ptx::barrier_cluster_wait();
  if (rank == 0 && threadIdx.x == 0) {
    // The barrier's one arrival, and the bytes its phase waits for. Stores that land before this
    // take the count below zero; the phase still needs this arrival to complete.
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &landed,
                                   uint32_t{sizeof(warp_sums)});
  }
  if (row_lane == 0) {  // past the last column too: rank 0 expects every byte of warp_sums
    acc_t* to = cluster.map_shared_rank(&warp_sums[rank * kClusterWarps + warp][col_lane * kV], 0);
    uint64_t* bar = cluster.map_shared_rank(&landed, 0);
#pragma unroll
    for (int k = 0; k < kV; k += kStore) {
      acc_t part[kStore];  // v4.b32 (float) or v2.b64 (double)
#pragma unroll
      for (int i = 0; i < kStore; ++i) part[i] = acc[k + i];
      ptx::st_async(to + k, part, bar);
    }
  }
  if (rank != 0) return;
  while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cluster, &landed, 0)) {
  }
  if (threadIdx.x < kSlab) {
    acc_t total = 0;
#pragma unroll
    for (int b = 0; b < kClusterBlocks; ++b) {
      acc_t s = 0;
#pragma unroll
      for (int w = 0; w < kClusterWarps; ++w) s += warp_sums[b * kClusterWarps + w][threadIdx.x];
      total += s;
    }
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kSlab + threadIdx.x;
    if (c < cols) out[c] = static_cast<T>(total);
  }
#endif
}

// A launch of column_sum_cluster_kernel: `slabs` clusters of kClusterBlocks blocks, with
// `overlap`, a programmatic dependent launch: its blocks are placed and run their prologue while
// the kernel before it finishes (once that one's blocks have all triggered or exited), and wait in
// pdl_begin() before their first load. The kernel itself triggers once past its wait, so a dependent
// launch after it (sum_partials, another column sum) starts the same way.
struct ClusterLaunch {
  cudaLaunchAttribute attrs[2]{};
  cudaLaunchConfig_t config{};
  ClusterLaunch(int64_t slabs, cudaStream_t stream, bool overlap) {
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = 1;
    attrs[0].val.clusterDim.y = kClusterBlocks;
    attrs[0].val.clusterDim.z = 1;
    attrs[1] = programmatic_serialization();
    config.gridDim = dim3(static_cast<unsigned>(slabs), kClusterBlocks);
    config.blockDim = dim3(kClusterWarps * kWarpSize);
    config.stream = stream;
    config.attrs = attrs;
    config.numAttrs = overlap ? 2 : 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// How many clusters of `kernel` run at once on `device`, asked once a device; 0 where it cannot
// run its cluster body there: a GPU before sm_90, or a build whose newest code for the GPU is
// older PTX (JIT-compiled without that body).
template <typename Kernel>
int64_t cluster_capacity(Kernel kernel, int device) {
  static std::mutex mutex;
  static std::map<int, int64_t> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(device);
  if (it != known.end()) return it->second;
  int clusters = 0;
  if (runs_sm90_code(reinterpret_cast<const void*>(kernel), device)) {
    const ClusterLaunch launch(1, nullptr, false);
    C10_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config));
  }
  return known[device] = clusters;
}

// The number of slabs column_sum_cluster_kernel takes for t, or 0 where t takes two launches.
// One cluster a slab, when the clusters fill every SM (C >= 544 bf16 on an H200) and all run at
// once (C <= 1984 bf16 on an H200, 62 clusters; at C = 2304 two waves were slower than two
// launches).
template <typename T>
int64_t cluster_slabs(const at::Tensor& t) {
  constexpr int kV = kVec16<T>;
  const int64_t cols = t.size(1);
  if (cols % kV != 0 || !is_aligned(t.data_ptr(), 16)) return 0;
  const int64_t slabs = (cols + kColLanes * kV - 1) / (kColLanes * kV);
  const int64_t sms = at::cuda::getDeviceProperties(t.get_device())->multiProcessorCount;
  if (slabs * kClusterBlocks < sms) return 0;
  return slabs <= cluster_capacity(column_sum_cluster_kernel<T, kV>, t.get_device()) ? slabs : 0;
}

}  // namespace

bool column_sum_takes_one_launch(const at::Tensor& t) {
  const c10::cuda::CUDAGuard guard(t.device());
  bool one = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "column_sum",
                                  [&] { one = cluster_slabs<scalar_t>(t) > 0; });
  return one;
}

at::Tensor column_sum_cuda(const at::Tensor& t, bool one_launch) {
  const c10::cuda::CUDAGuard guard(t.device());
  const int64_t rows = t.size(0), cols = t.size(1);
  at::Tensor out = at::empty({cols}, t.options());
  if (cols == 0) return out;
  if (rows == 0) return out.zero_();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "column_sum", [&] {
    using T = scalar_t;
    using acc_t = acc_type<T>;
    auto launch = [&](auto kernel, int vec) {
      const int64_t slabs = (cols + int64_t{kWarpSize} * vec - 1) / (int64_t{kWarpSize} * vec);
      // About 4 blocks an SM in all, at least 8 rows (one a warp) a chunk.
      const int64_t want_chunks = std::max<int64_t>(1, 4 * sms / slabs);
      const int64_t per_chunk = std::max<int64_t>(kWarps, (rows + want_chunks - 1) / want_chunks);
      const int64_t chunks = std::min<int64_t>((rows + per_chunk - 1) / per_chunk, 65535);
      const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
      at::Tensor partial =
          at::empty({chunks, cols}, t.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      launch_dependent(kernel, dim3(static_cast<unsigned>(slabs), static_cast<unsigned>(chunks)),
                       dim3(kWarps * kWarpSize), 0, stream, t.data_ptr<T>(),
                       partial.data_ptr<acc_t>(), rows, cols, rows_per_chunk);
      launch_sum_partials(partial.data_ptr<acc_t>(), out.data_ptr<T>(), chunks, cols, cols, stream);
    };
    if (const int64_t slabs = one_launch ? cluster_slabs<T>(t) : 0; slabs > 0) {
      const ClusterLaunch cluster(slabs, stream, true);
      C10_CUDA_CHECK(cudaLaunchKernelEx(&cluster.config, column_sum_cluster_kernel<T, kVec16<T>>,
                                        t.data_ptr<T>(), out.data_ptr<T>(), rows, cols));
      return;
    }
    const bool vector = cols % kVec16<T> == 0 && is_aligned(t.data_ptr(), 16);
    if (vector) {
      launch(column_partials_kernel<T, kVec16<T>>, kVec16<T>);
    } else {
      launch(column_partials_kernel<T, 1>, 1);
    }
  });
  return out;
}

bool linear_bias_cuda_built() {
  return true;
}

}  // namespace brrr::detail
