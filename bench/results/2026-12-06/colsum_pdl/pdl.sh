#!/usr/bin/env bash
# Call P1: programmatic dependent launch on the one-launch column sum (BRRR_COLSUM_PDL 1 / 0).
set -uo pipefail
B=build-gpu; R=/tmp/pr; rm -rf $R; mkdir -p $R $OUT/gc
trap "rm -f $R/build.log; tar czf $OUT/pr.tgz -C /tmp pr" EXIT
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $R/smi.txt; cat $R/smi.txt
BUILD_TARGETS="tests/ops_tests bench/bench_ops_bench" BUDGET_S=400 OUT=$OUT/gc BUILD_DIR=$B bash scripts/gpu_check.sh build > $R/build.log 2>&1
echo "build done at $((SECONDS-T0)) s"; [[ -x $B/bench/bench_ops_bench ]] || { tail -30 $R/build.log; exit 1; }
for p in 1 0; do
  BRRR_COLSUM_PDL=$p $B/tests/ops_tests --gtest_filter='LinearBias*:*ColumnSum*' > $R/tests_p$p.log 2>&1
  echo "tests pdl $p rc=$? $(grep -E '^\[  PASSED|FAILED TEST' $R/tests_p$p.log | head -2 | tr '\n' ' ')"
done
echo "tests done at $((SECONDS-T0)) s"
for sweep in ${SWEEPS:-1 2}; do
  for p in 1 0; do
    BRRR_COLSUM_PDL=$p $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad,wgrad_bgrad --csv $R/b_s${sweep}_p$p.csv > $R/b_s${sweep}_p$p.log 2>&1
    echo "sweep $sweep pdl $p: $(grep -E 'bias_grad_768,(brrr_graph_per_call|copy_half_graph_per_call)|_proj,separate|ceil' $R/b_s${sweep}_p$p.csv | cut -d, -f1,2,4,5 | tr '\n' ' ')  at $((SECONDS-T0)) s"
  done
done
if [[ -n ${MEMCHECK:-} ]]; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/ops_tests --gtest_filter='LinearBias*Cuda*:*ColumnSum*Cuda*' > $R/memcheck.log 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | tail -3
  timeout 120 compute-sanitizer --tool synccheck --error-exitcode 3 $B/tests/ops_tests --gtest_filter='LinearBias*Cuda*:*ColumnSum*Cuda*' > $R/synccheck.log 2>&1
  echo "synccheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/synccheck.log | tail -3
fi
echo "all done at $((SECONDS-T0)) s"
