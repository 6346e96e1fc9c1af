#!/usr/bin/env bash
# Call A: the cuBLAS workspace probe, then build + GPU tests + graph tests of HEAD.
set -uo pipefail
mkdir -p $OUT
python3 scratch/ws_probe.py 2>&1 | tee $OUT/ws_probe.txt
export BUDGET_S=540 STAGE_BUDGET_TESTS=300
OUT=$OUT/gc bash scripts/gpu_check.sh build tests graphtests > $OUT/gpu_check.txt 2>&1
tail -60 $OUT/gpu_check.txt
