#!/usr/bin/env bash
# Call 6: is the eager batch-64 step's spread its launch thread losing cores to the 16 loader
# workers? The same run with data.worker_nice=10 (the workers lower their own priority; the tree's
# uncommitted change of the call) against the plain run (worker_nice 0), alternating, 4 each.
#   OUT=$OUT bash bench/results/2026-12-07/h200_recheck/nice.sh
set -uo pipefail
B=build-gpu; R=$OUT/rc; mkdir -p $R; T0=$SECONDS; LIMIT=${LIMIT:-400}
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/smi.txt; lscpu > $R/lscpu.txt
if [[ ! -f $B/build.ninja ]]; then
  TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRRR_CUDA_MIN_ARCH=90 \
    -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') > $R/cmake.log 2>&1
fi
ninja -C $B -j16 trainer tests/data_tests > $R/build.log 2>&1; echo "build rc=$? at $((SECONDS-T0)) s"
[[ -f data_cache/photos/.complete ]] || { scripts/prepare_data.sh photos > $R/data.log 2>&1; echo "data rc=$? at $((SECONDS-T0)) s"; }
run() {  # run NAME WORKER_NICE (skipped when under 40 s of LIMIT is left)
  local name=$1 nice=$2; rm -rf runs/s/$name
  (( LIMIT - (SECONDS - T0) > 40 )) || { echo "$name skipped: out of time"; return; }
  timeout 60 $B/trainer --config configs/blog/07_fused.yaml --set train.cuda_graph=false \
    --set data.worker_nice=$nice --set run.name=$name --set run.output_dir=runs/s > $R/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0)) s"
  mkdir -p $R/runs/$name; cp runs/s/$name/{metrics.jsonl,gpu.jsonl,config.yaml} $R/runs/$name/ 2>/dev/null
}
for i in 1 2 3 4; do run plain_$i 0; run nice10_$i 10; done
timeout 60 $B/tests/data_tests --gtest_filter='*Nicer*' > $R/nice_test.log 2>&1; echo "nice test rc=$?"
rm -rf runs/s/ps  # the workers' nice values seen from outside, mid-run
( $B/trainer --config configs/blog/07_fused.yaml --set data.worker_nice=10 --set run.name=ps --set run.output_dir=runs/s > $R/ps_run.log 2>&1 & p=$!; sleep 5; ps -o pid,ni,comm --ppid $p > $R/ps.txt; ps -o pid,ni,comm -p $p >> $R/ps.txt; wait $p ); head -4 $R/ps.txt
python3 bench/summarize_runs.py $R/runs > $R/runs.txt 2>&1; cut -c1-110 $R/runs.txt
