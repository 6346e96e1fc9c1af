#!/usr/bin/env bash
# Call 9: call 8 with the expect-tx arrival after the cluster wait (racecheck flagged init then arrive in one thread).
# (no __syncthreads, no cluster.sync after the loads): tests, memcheck/racecheck/synccheck, bench twice.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; git diff --stat 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
git diff > $L/kernel.patch 2>/dev/null
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 90 $B/tests/ops_tests --gtest_filter='LinearBias*' --gtest_brief=1 > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
for i in 1 2; do
  timeout 60 $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_$i.csv > $L/bench_$i.log 2>&1; echo "bench $i rc=$? $((SECONDS-T0)) s"
  grep -E "bias_grad_768,(brrr_graph_per|copy_graph_per|read_|copy_half|brrr_two_launches_graph_per)" $L/ops_$i.csv
done
for tool in racecheck memcheck synccheck; do
  [[ $SECONDS -lt 480 ]] || break
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $B/tests/ops_tests --gtest_filter='LinearBiasCudaTest.OneLaunch*' > $L/san_$tool.log 2>&1; echo "$tool rc=$? $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $L/san_$tool.log | head -3
done
echo "done $((SECONDS-T0)) s"
