#!/usr/bin/env bash
# Call D/E: ResNet-50 ladder rungs 5 and 6 (batch 64 graphed); E: images normalised into the autocast dtype.
set -uo pipefail
mkdir -p $OUT
export BUDGET_S=575 BUILD_TARGETS="trainer brrr_tokenize" STAGE_BUDGET_BLOG_GRAPH=220
OUT=$OUT/gc bash scripts/gpu_check.sh build blog_graph > $OUT/gpu_check.txt 2>&1
tail -45 $OUT/gpu_check.txt
