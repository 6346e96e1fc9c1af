#!/usr/bin/env bash
# call 1: build bench + tests; the BGRADB experiment; the changed GPU tests.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p $OUT/c1
export BUILD_TARGETS="bench_ops_bench trainer_tests ops_tests"
BUDGET_S=300 OUT=$OUT/gc bash scripts/gpu_check.sh build > $OUT/c1/build.log 2>&1
tail -5 $OUT/c1/build.log
B=build-gpu
[[ -f $B/golden/optim_trajectories.pt ]] || python3 tests/golden/make_all.py --out $B/golden > $OUT/c1/golden.log 2>&1
timeout 200 $B/bench/bench_ops_bench --only wgrad_bgrad,bias_grad --repeats 20 --csv $OUT/c1/wgrad.csv > $OUT/c1/bench.log 2>&1; echo "bench rc $?"
cat $OUT/c1/bench.log
timeout 120 $B/tests/trainer_tests --gtest_filter='TrainerCudaTest.PeakMemory*:CudaGraphTest.EveryEagerStep*' 2>&1 | tail -15
