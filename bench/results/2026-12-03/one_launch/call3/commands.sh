#!/usr/bin/env bash
# Call 3: the kept one-launch column sum (8 warps a block, 8 loads in flight a thread): ops GPU
# tests, sanitizer, bench twice; then variant B (16 loads in flight a thread) rebuilt, bench twice.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
$B/tests/ops_tests --gtest_filter='*Cuda*' --gtest_brief=1 > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $L/tests.log | head -20
compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/ops_tests --gtest_filter='LinearBiasCuda*' > $L/sanitizer.log 2>&1; echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $L/sanitizer.log | head -5
echo "tests done $((SECONDS-T0)) s"
for i in A1 A2; do
  $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_$i.csv > $L/bench_$i.log 2>&1; echo "bench $i rc=$? $((SECONDS-T0)) s"
  grep -E "ceiling|bias_grad_768,brrr|two_launches_graph_per|copy_graph_per" $L/ops_$i.csv
done
sed -i 's/constexpr int kUnroll = 8;/constexpr int kUnroll = 16;/' core/ops/linear_bias.cu
grep -n "kUnroll = " core/ops/linear_bias.cu
ninja -C $B -j16 bench_ops_bench > $L/build_B.log 2>&1 || { tail -30 $L/build_B.log; exit 1; }
echo "build B $((SECONDS-T0)) s"
for i in B1 B2; do
  $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_$i.csv > $L/bench_$i.log 2>&1; echo "bench $i rc=$? $((SECONDS-T0)) s"
  grep -E "ceiling|bias_grad_768,brrr|two_launches_graph_per|copy_graph_per" $L/ops_$i.csv
done
timeout 100 ncu --clock-control none -k 'regex:column_sum_cluster' -c 2 --section SpeedOfLight --section LaunchStats --section Occupancy $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu_B.log 2>&1; echo "ncu rc=$?"
grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Max Active Clusters" $L/ncu_B.log | head -12
sed -i 's/constexpr int kUnroll = 16;/constexpr int kUnroll = 8;/' core/ops/linear_bias.cu
echo "done $((SECONDS-T0)) s"
