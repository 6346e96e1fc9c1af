#!/usr/bin/env bash
# Call 3: the tree to land (x_bias sums in registers; column-sum code as on main): GPU tests of
# residual_layernorm (the fixed agreement test, sanitizer on it), then the bench rows.
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
$B/tests/ops_tests --gtest_filter='ResidualLayerNormCuda*' > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $L/tests.log | head
compute-sanitizer --tool memcheck $B/tests/ops_tests --gtest_filter='ResidualLayerNormCudaTest.XBias*' > $L/sanitizer.log 2>&1; echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $L/sanitizer.log | head -5
echo "tests done $((SECONDS-T0)) s"
$B/bench/bench_ops_bench --repeats 30 --only ceilings,residual_bias,bias_grad --csv $L/ops.csv > $L/bench.log 2>&1; echo "bench rc=$? $((SECONDS-T0)) s"
grep -E "ceiling|graph" $L/ops.csv
