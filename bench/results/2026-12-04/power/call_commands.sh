#!/usr/bin/env bash
# call 4: SM clock and power during brrr's graphed GPT-2 B=16 step and torch.compile's, same call.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p $OUT/c4
BUILD_TARGETS="trainer brrr_tokenize" BUDGET_S=420 OUT=$OUT/gc bash scripts/gpu_check.sh build > $OUT/c4/build.log 2>&1
grep "rc=" $OUT/c4/build.log | head -2
[[ -s data_cache/fortunes_train.bin ]] || scripts/prepare_data.sh tokens > $OUT/c4/data.log 2>&1
nvidia-smi --query-gpu=name,power.limit,power.default_limit,clocks.max.sm,clocks.max.mem --format=csv | tee $OUT/c4/limits.csv
sample() { nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu --format=csv,noheader,nounits -lms 100 > "$1" & SAMPLER=$!; }
sample $OUT/c4/smi_brrr_graph.csv
build-gpu/trainer --config configs/gpt2-124m.yaml --set run.name=c4_graph --set run.output_dir=runs/c4 \
  --set data.batch_size=16 --set train.grad_accum_steps=1 --set train.max_steps=150 --set train.log_every=25 \
  --set train.eval_every=0 --set train.eval_batches=1 --set model.fused=auto --set train.cuda_graph=auto \
  --set run.overwrite=true > $OUT/c4/brrr_graph.log 2>&1; echo "brrr rc $?"
kill $SAMPLER; sleep 1
cp runs/c4/c4_graph/metrics.jsonl $OUT/c4/brrr_graph_metrics.jsonl 2>/dev/null
cp runs/c4/c4_graph/gpu.jsonl $OUT/c4/brrr_graph_gpu.jsonl 2>/dev/null
sample $OUT/c4/smi_torch_compile.csv
python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes compile --accum 1 --batch 16 \
  --steps 60 --warmup 10 --csv $OUT/c4/torch_compile.csv > $OUT/c4/torch_compile.log 2>&1; echo "torch rc $?"
kill $SAMPLER
tail -3 $OUT/c4/brrr_graph.log; tail -3 $OUT/c4/torch_compile.log
python3 - $OUT/c4 <<'PY'
import csv, statistics, sys, pathlib
d = pathlib.Path(sys.argv[1])
for name in ["smi_brrr_graph.csv", "smi_torch_compile.csv"]:
    rows = [r for r in csv.reader((d / name).open()) if len(r) >= 6]
    busy = [r for r in rows if r[4].strip().isdigit() and int(r[4]) >= 95 and float(r[3]) > 400]
    if not busy: print(name, "no busy samples"); continue
    clk = [float(r[1]) for r in busy]; pw = [float(r[3]) for r in busy]
    print(f"{name}: {len(busy)} busy samples of {len(rows)}: SM clock median {statistics.median(clk):.0f} MHz "
          f"(p10 {sorted(clk)[len(clk)//10]:.0f}, p90 {sorted(clk)[9*len(clk)//10]:.0f}), power median {statistics.median(pw):.1f} W")
PY
