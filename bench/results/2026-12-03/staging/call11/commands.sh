#!/usr/bin/env bash
# Call 11 (commit 5e72f91): why the 768-column sum stays 1.7 us behind a copy of as many bytes: ncu on
# column_sum_cluster_kernel (speed of light, memory, warp states, scheduler, occupancy).
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo 5e72f91; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 150 ncu --clock-control none -k 'regex:column_sum_cluster|column_partials' -c 6 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section SourceCounters $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu.log 2>&1; echo "ncu rc=$? $((SECONDS-T0)) s"
grep -E "column_sum_cluster|column_partials|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per" $L/ncu.log | head -80
echo "done $((SECONDS-T0)) s"
