#!/usr/bin/env bash
# Call 2: on an H200, the B=16 comparison of c1.sh (brrr all rows / 4096-row chunks / torch.compile);
# on any other GPU, every GPU test of the tree (scripts/gpu_check.sh build tests: each suite's CUDA
# tests and memcheck of the op tests).
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $name"
if [[ $name == *H200* ]]; then
  bash scratch/c1.sh
else
  BUDGET_S=570 OUT=$OUT/gc bash scripts/gpu_check.sh build tests > $OUT/gpu_check.log 2>&1; echo "gpu_check rc=$?"
  tail -40 $OUT/gpu_check.log
fi
