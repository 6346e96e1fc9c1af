#!/usr/bin/env bash
# Call 1 (2026-12-06): the frozen-input change on the GPU (op tests, memcheck), then B=16 brrr c0 / c4096 / torch.compile in one call.
set -uo pipefail
export PYTHONUNBUFFERED=1
B=build-gpu; R=/tmp/c1; rm -rf $R; mkdir -p $R $OUT/gc
trap 'tar czf $OUT/r.tgz -C /tmp c1' EXIT
T0=$SECONDS
{ date -u +%FT%TZ; git rev-parse --short HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; } > $R/meta.txt
cat $R/meta.txt
BUILD_TARGETS="trainer tests/ops_tests brrr_tokenize" BUDGET_S=400 OUT=$OUT/gc BUILD_DIR=$B bash scripts/gpu_check.sh build > $R/build.log 2>&1
echo "build done at $((SECONDS-T0)) s"; [[ -x $B/trainer && -x $B/tests/ops_tests ]] || { tail -30 $OUT/gc/logs/build.log; exit 1; }
( [[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $R/data.log 2>&1 ) &
DATA=$!
$B/tests/ops_tests --gtest_filter='LmHead*:FusedClassifier*' > $R/ops_tests.log 2>&1; echo "ops_tests rc=$?"; grep -E "^\[  PASSED|FAILED|Failure" $R/ops_tests.log | head -10
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/ops_tests --gtest_filter='LmHeadLossCudaTest.Chunked*' > $R/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | tail -3
wait $DATA; tail -2 $R/data.log 2>/dev/null; echo "data ready at $((SECONDS-T0)) s"
gpt() {  # name chunk
  rm -rf runs/c1/$1
  $B/trainer --config configs/gpt2-124m.yaml --set run.name=$1 --set run.output_dir=runs/c1 \
    --set data.batch_size=16 --set train.grad_accum_steps=1 --set train.max_steps=100 --set train.log_every=20 \
    --set train.eval_every=0 --set train.eval_batches=1 --set train.checkpoint_every=0 --set model.head_chunk_rows=$2 > $R/$1.log 2>&1
  echo "$1 rc=$? at $((SECONDS-T0)) s"
}
gpt b16_c0 0
gpt b16_c4096 4096
if (( SECONDS - T0 < 470 )); then
  timeout 125 python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes compile --accum 1 --batch 16 \
    --steps 40 --warmup 10 --csv $R/compile_b16.csv > $R/compile_b16.log 2>&1; echo "compile rc=$? at $((SECONDS-T0)) s"; tail -3 $R/compile_b16.log
fi
(( SECONDS - T0 < 540 )) && gpt b16_c4096_again 4096
python3 - runs/c1 <<'PY' | tee $R/summary.txt
import json, pathlib, statistics, sys
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"]
    s = [r for r in recs if r["kind"] == "summary"]
    tps = [r["tokens_per_s"] for r in train[1:]]
    print(f"{run.name}: median {statistics.median(tps):.0f} tokens/s over {len(tps)} windows, "
          f"losses {[round(r['loss'],4) for r in train]}, peak {s[-1].get('mem_peak_mib',0) if s else '?'} MiB")
PY
for r in runs/c1/*; do mkdir -p $R/runs/$(basename $r); cp $r/metrics.jsonl $r/config.yaml $R/runs/$(basename $r)/ 2>/dev/null; done; true
