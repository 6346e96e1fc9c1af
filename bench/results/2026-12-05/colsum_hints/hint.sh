#!/usr/bin/env bash
# Call H1: cache hints on the 768-column sum's loads (BRRR_COLSUM_HINT 0..5), tests, SASS, memcheck of the chunked head.
set -uo pipefail
B=build-gpu; R=/tmp/hr; rm -rf $R; mkdir -p $R $OUT/gc
trap 'tar czf $OUT/r.tgz -C /tmp hr' EXIT
T0=$SECONDS
if [[ -z ${NOBUILD:-} ]]; then
BUILD_TARGETS="tests/ops_tests bench/bench_ops_bench" BUDGET_S=400 OUT=$OUT/gc BUILD_DIR=$B bash scripts/gpu_check.sh build > $R/build.log 2>&1
fi
echo "build done at $((SECONDS-T0)) s"; [[ -x $B/bench/bench_ops_bench ]] || { tail -30 $R/build.log; exit 1; }
O=$(find $B -name 'linear_bias.cu.o' | head -1)
cuobjdump --dump-sass -arch sm_90 $O > $R/sass.txt 2>&1
python3 - $R/sass.txt <<'PY' | tee $R/sass_ldg.txt
import re, sys
fn = None; seen = {}
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m: fn = m.group(1); continue
    if fn and "column_sum_cluster" in fn and "LDG" in line:
        op = re.search(r"(LDG\S*)", line).group(1)
        seen.setdefault(fn, set()).add(op)
for fn, ops in seen.items(): print(fn[-60:], sorted(ops))
PY
for h in ${TEST_HINTS:-0 2 3 5}; do
  BRRR_COLSUM_HINT=$h $B/tests/ops_tests --gtest_filter='LinearBias*Cuda*:*ColumnSum*Cuda*' > $R/tests_h$h.log 2>&1
  echo "tests hint $h rc=$? $(grep -E '^\[  PASSED|FAILED TEST' $R/tests_h$h.log | head -2 | tr '\n' ' ')"
done
echo "tests done at $((SECONDS-T0)) s"
for sweep in 1 2; do
  for h in ${HINTS:-0 1 2 3 4 5}; do
    BRRR_COLSUM_HINT=$h $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $R/b_s${sweep}_h$h.csv > $R/b_s${sweep}_h$h.log 2>&1
    echo "sweep $sweep hint $h: $(grep -E 'bias_grad_768,(brrr_graph_per_call|copy_half_graph_per_call)' $R/b_s${sweep}_h$h.csv | cut -d, -f2,4,5 | tr '\n' ' ')  at $((SECONDS-T0)) s"
  done
done
grep -h "copy" $R/b_s1_h0.csv | head -5
if [[ -n ${MEMCHECK:-} ]]; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/ops_tests --gtest_filter='LmHeadLossCudaTest.*:LmHeadLossChunked*' > $R/memcheck.log 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | tail -3
fi
if [[ -n ${MLP:-} ]]; then
  $B/bench/bench_ops_bench --repeats 20 --only mlp_gelu,wgrad_bgrad --csv $R/mlp_wgrad.csv > $R/mlp_wgrad.log 2>&1; echo "mlp/wgrad rc=$?"; cat $R/mlp_wgrad.csv
fi
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $R/smi.txt
echo "all done at $((SECONDS-T0)) s"
