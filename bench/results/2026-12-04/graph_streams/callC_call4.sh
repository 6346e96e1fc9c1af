#!/usr/bin/env bash
# Call C: the article recipe (blog rungs 4-6 vs torch eager/compile and HF) and GPT-2 B=16 graphed/eager again.
set -uo pipefail
mkdir -p $OUT
export BUDGET_S=570 BUILD_TARGETS="trainer brrr_tokenize" STAGE_BUDGET_GRAPH_GPT=120
OUT=$OUT/gc bash scripts/gpu_check.sh build recipe graph_gpt > $OUT/gpu_check.txt 2>&1
tail -45 $OUT/gpu_check.txt
