#!/usr/bin/env bash
# Call 2 of 2026-12-05 (H100 80GB HBM3, 07:28Z, on 6084def + the uncommitted train.profile.memory):
# the build was already there from call 1, which failed on max_steps 10 < warmup.
# Memory peaks: brrr rung 5 (first steps and a steady step) vs torch.compile, with allocations traced.
set -uo pipefail
export PYTHONUNBUFFERED=1
B=build-gpu
mkdir -p $OUT/gc
[[ -x $B/trainer ]] || BUILD_TARGETS="trainer brrr_tokenize" BUDGET_S=420 OUT=$OUT/gc BUILD_DIR=$B bash scripts/gpu_check.sh build || true
tail -5 $OUT/gc/logs/build.log 2>/dev/null
[[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $OUT/data.log 2>&1
R=$OUT/r; mkdir -p $R
run_brrr() {  # name start steps max
  rm -rf runs/mem/$1
  $B/trainer --config configs/blog/gpt_05_fused.yaml --set run.name=$1 --set run.output_dir=runs/mem \
    --set train.eval_every=0 --set train.max_steps=$4 --set train.profile.start_step=$2 \
    --set train.profile.steps=$3 --set train.profile.memory=true > $R/$1.log 2>&1
  echo "$1 rc=$?"; grep -i "peak\|mem" $R/$1.log | tail -3
  python3 scripts/memory_peak.py runs/mem/$1/trace.json --top 30 > $R/$1_peak.txt 2>&1
  grep -h "peak_mem\|mem_peak" runs/mem/$1/*.json* 2>/dev/null | tail -2
}
run_brrr first 0 2 25
run_brrr steady 8 1 25
ls runs/mem/steady
python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes compile --accum 4 --batch 8 \
  --steps 3 --warmup 5 --profile $R/tfirst --profile-steps 2 --profile-at start --profile-memory > $R/tfirst.log 2>&1; tail -3 $R/tfirst.log
python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes compile --accum 4 --batch 8 \
  --steps 3 --warmup 5 --profile $R/tsteady --profile-steps 1 --profile-memory > $R/tsteady.log 2>&1; tail -3 $R/tsteady.log
python3 scripts/memory_peak.py runs/mem/first/trace.json --against $R/tfirst/compile_accum4.json --top 40 > $R/cmp_first.txt 2>&1
python3 scripts/memory_peak.py runs/mem/steady/trace.json --against $R/tsteady/compile_accum4.json --top 40 > $R/cmp_steady.txt 2>&1
head -5 $R/cmp_first.txt $R/cmp_steady.txt
grep -A3 "peak difference" $R/cmp_first.txt $R/cmp_steady.txt
cp runs/mem/first/metrics* runs/mem/steady/metrics* $R/ 2>/dev/null
ls runs/mem/first
cd $R && tar czf $OUT/res.tgz *.txt *.log *.csv 2>/dev/null; cd -
gzip -c $R/tfirst/compile_accum4.json > $OUT/tfirst.json.gz; for f in runs/mem/steady/trace.json $R/tsteady/compile_accum4.json; do gzip -c $f > $OUT/$(basename $(dirname $f))_$(basename $f).gz; done
ls -la $OUT
