#!/usr/bin/env bash
# Call 3: the same A/B as ab.sh, four runs each alternating, then each build with 12 loader workers
# (16 workers on 16 cores compete with the thread that launches the eager step's kernels).
# Reuses call 2's build-gpu/trainer_{head,before} when the machine is still warm, else builds them.
#   OUT=$OUT bash bench/results/2026-12-07/h200_recheck/ab2.sh
set -uo pipefail
B=build-gpu; R=$OUT/rc; mkdir -p $R; T0=$SECONDS; D=bench/results/2026-12-07/h200_recheck
[[ -x $B/trainer_head && -x $B/trainer_before ]] || { bash $D/ab.sh; exit; }
lscpu > $R/lscpu.txt; uptime > $R/uptime.txt
run() {  # run BUILD NAME [--set ...]
  local v=$1 name=$2; shift 2; rm -rf runs/s/$name
  timeout 60 $B/trainer_$v --config configs/blog/07_fused.yaml --set train.cuda_graph=false \
    --set run.name=$name --set run.output_dir=runs/s "$@" > $R/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0)) s"
  mkdir -p $R/runs/$name; cp runs/s/$name/{metrics.jsonl,gpu.jsonl,config.yaml} $R/runs/$name/ 2>/dev/null
}
for i in 3 4 5 6; do run head head_$i; run before before_$i; done
for i in 1 2; do run head head_w12_$i --set data.num_workers=12; run before before_w12_$i --set data.num_workers=12; done
python3 bench/summarize_runs.py $R/runs > $R/runs.txt 2>&1; cut -c1-120 $R/runs.txt
