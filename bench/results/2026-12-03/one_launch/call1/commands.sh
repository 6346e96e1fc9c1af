#!/usr/bin/env bash
# Call 1: column_sum in one launch (clusters) against two launches: tests, sanitizer, bench, ncu.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
$B/tests/ops_tests --gtest_filter='LinearBiasCuda*' > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|error" $L/tests.log | head -20
compute-sanitizer --tool memcheck $B/tests/ops_tests --gtest_filter='LinearBiasCudaTest.OneLaunch*' > $L/sanitizer.log 2>&1; echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $L/sanitizer.log | head -5
echo "tests done $((SECONDS-T0)) s"
for i in 1 2; do
  $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_$i.csv > $L/bench_$i.log 2>&1; echo "bench $i rc=$? $((SECONDS-T0)) s"
  grep -E "ceiling|bias_grad" $L/ops_$i.csv
done
timeout 150 ncu --clock-control none -k 'regex:column|sum_partials' -c 12 --section SpeedOfLight --section LaunchStats --section Occupancy $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu.log 2>&1; echo "ncu rc=$?"
grep -E "column_sum_cluster|column_partials|sum_partials|Duration|DRAM Throughput|Registers|Achieved Occupancy|Cluster" $L/ncu.log | head -60
echo "done $((SECONDS-T0)) s"
