#!/usr/bin/env bash
# Call 5: column_sum's one-launch kernel with cp.async staging (kUnroll rows a group, kStages
# groups in flight): GPU tests under each shape, then bench rows under each shape (same run has
# the two-launch path as baseline), then torch.compile's bias_grad.
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
for v in 0 1 2 3 4 5 6 7; do
  BRRR_COLUMN_SUM_VARIANT=$v timeout 60 $B/tests/ops_tests --gtest_filter='LinearBiasCuda*' --gtest_brief=1 > $L/tests_$v.log 2>&1; echo "tests v$v rc=$?"; grep -E "Failure|FAILED" $L/tests_$v.log | head -5
done
echo "tests done $((SECONDS-T0)) s"
for v in 0 5 1 6 2 7 3 4 0 5; do
  [[ $SECONDS -gt 480 ]] && break
  BRRR_COLUMN_SUM_VARIANT=$v timeout 60 $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_v${v}_$SECONDS.csv > $L/bench_v$v.log 2>&1; echo "bench v$v rc=$? $((SECONDS-T0)) s"
  grep -hE "copy_graph_per|bias_grad_768,brrr_graph_per|two_launches_graph_per|bias_grad_2304,brrr_graph_per" $L/ops_v${v}_*.csv | tail -4
done
[[ $SECONDS -lt 500 ]] && { timeout 90 compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/ops_tests --gtest_filter='LinearBiasCuda*' > $L/sanitizer.log 2>&1; echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY" $L/sanitizer.log | head -3; }
echo "done $((SECONDS-T0)) s"
