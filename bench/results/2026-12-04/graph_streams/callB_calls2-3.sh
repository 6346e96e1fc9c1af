#!/usr/bin/env bash
# Call B: graph mode's eager steps on the capture stream; trainer CUDA tests and GPT-2 B=16 graphed/eager vs torch.
set -uo pipefail
mkdir -p $OUT
git diff --stat > $OUT/diff.txt 2>&1
export BUDGET_S=560 BUILD_TARGETS="trainer trainer_tests brrr_tokenize" STAGE_BUDGET_GRAPH_GPT=300
CLI_FILTER=NONE OUT=$OUT/gc bash scripts/gpu_check.sh build graphtests graph_gpt > $OUT/gpu_check.txt 2>&1
tail -45 $OUT/gpu_check.txt
