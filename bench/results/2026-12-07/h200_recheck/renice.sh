#!/usr/bin/env bash
# Call 6: is the eager batch-64 step's spread its launch thread losing cores to the 16 loader
# workers? The same run with every worker reniced to +10 from outside (a loop over the trainer's
# child processes; workers are respawned each epoch) against the plain run, alternating, 4 each.
#   OUT=$OUT bash bench/results/2026-12-07/h200_recheck/renice.sh
set -uo pipefail
B=build-gpu; R=$OUT/rc; mkdir -p $R; T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/smi.txt; lscpu > $R/lscpu.txt
if [[ ! -f $B/build.ninja ]]; then
  TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRRR_CUDA_MIN_ARCH=90 \
    -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') > $R/cmake.log 2>&1
fi
ninja -C $B -j16 trainer > $R/build.log 2>&1; echo "build rc=$? at $((SECONDS-T0)) s"
[[ -f data_cache/photos/.complete ]] || { scripts/prepare_data.sh photos > $R/data.log 2>&1; echo "data rc=$? at $((SECONDS-T0)) s"; }
run() {  # run NAME RENICE
  local name=$1 nice=$2; rm -rf runs/s/$name
  $B/trainer --config configs/blog/07_fused.yaml --set train.cuda_graph=false \
    --set run.name=$name --set run.output_dir=runs/s > $R/$name.log 2>&1 &
  local pid=$! n=0
  if [[ $nice != 0 ]]; then
    while kill -0 $pid 2>/dev/null; do
      for c in $(pgrep -P $pid); do
        [[ $(ps -o ni= -p $c 2>/dev/null | tr -d ' ') == "$nice" ]] || { renice -n $nice -p $c >/dev/null 2>&1 && n=$((n+1)); }
      done
      sleep 0.05
    done
  fi
  wait $pid; echo "$name rc=$? reniced=$n at $((SECONDS-T0)) s"
  mkdir -p $R/runs/$name; cp runs/s/$name/{metrics.jsonl,gpu.jsonl,config.yaml} $R/runs/$name/ 2>/dev/null
}
for i in 1 2 3 4; do run plain_$i 0; run nice10_$i 10; done
python3 bench/summarize_runs.py $R/runs > $R/runs.txt 2>&1; cut -c1-110 $R/runs.txt
