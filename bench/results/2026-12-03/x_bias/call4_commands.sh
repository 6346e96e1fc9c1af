#!/usr/bin/env bash
# Run as BUILD_DIR=build-gpu bash call4_commands.sh: call 4 ran it without BUILD_DIR and stopped at
# prepare_data; call 5 ran it with, one round (for r in 1); call 6 ran the two trainers again, off then on.
# Same-call A/B of the GPT-2 step: c_proj biases through residual_layernorm (x_bias) or not.
set -u
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" > $OUT/cfg.log 2>&1
ninja -C $B -j16 trainer brrr_tokenize > $OUT/build_on.log 2>&1 || { tail -30 $OUT/build_on.log; exit 1; }
echo "built on: $SECONDS s"
scripts/prepare_data.sh tokens > $OUT/data.log 2>&1 || { tail $OUT/data.log; exit 1; }
cp $B/trainer /tmp/trainer_on
sed -i 's/const bool defer = !(options_.dropout > 0.0 \&\& is_training());/const bool defer = false;/' models/gpt.cpp
grep -n "const bool defer" models/gpt.cpp
ninja -C $B -j16 trainer > $OUT/build_off.log 2>&1 || { tail -30 $OUT/build_off.log; exit 1; }
cp $B/trainer /tmp/trainer_off
echo "built off: $SECONDS s"
for r in 1 2; do
  for v in on off; do
    rm -rf runs/ab/$v$r
    /tmp/trainer_$v --config configs/gpt2-124m.yaml --set run.name=$v$r --set run.output_dir=runs/ab \
      --set data.batch_size=16 --set train.grad_accum_steps=1 --set train.max_steps=100 \
      --set train.log_every=20 --set train.eval_every=0 --set train.eval_batches=1 > $OUT/run_$v$r.log 2>&1
    mkdir -p $OUT/$v$r; cp runs/ab/$v$r/metrics.jsonl $OUT/$v$r/ 2>/dev/null
    python3 - runs/ab/$v$r/metrics.jsonl $v$r <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in recs if r["kind"] == "train"][1:]
s = [r for r in recs if r["kind"] == "summary"][-1]
print(sys.argv[2], f"median {statistics.median(r['tokens_per_s'] for r in train):.0f} tokens/s over {len(train)} windows,",
      f"peak {s.get('mem_peak_mib', 0):.0f} MiB, last loss {train[-1].get('loss')}")
PY
  done
done
echo "total $SECONDS s"
