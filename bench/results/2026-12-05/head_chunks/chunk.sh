#!/usr/bin/env bash
# Chunked head: GPU op tests, op bench, GPT step at B=16 and at the recipe with head_chunk_rows 0/4096/2048.
set -uo pipefail
export PYTHONUNBUFFERED=1
B=build-gpu
R=/tmp/cc_r; rm -rf $R; mkdir -p $R $OUT/gc
trap 'tar czf $OUT/r.tgz -C /tmp cc_r' EXIT
T0=$SECONDS
BUILD_TARGETS="${TARGETS:-trainer tests/ops_tests tests/models_tests bench/bench_ops_bench brrr_tokenize}" BUDGET_S=400 OUT=$OUT/gc BUILD_DIR=$B bash scripts/gpu_check.sh build > $R/build.log 2>&1
tail -3 $OUT/gc/logs/build.log 2>/dev/null; echo "build done at $((SECONDS-T0)) s"
[[ -x $B/trainer ]] || exit 1
( [[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $R/data.log 2>&1 ) &
DATA=$!
if [[ -z ${SKIP_OPS:-} ]]; then
$B/tests/ops_tests --gtest_filter='LmHead*:FusedClassifier*' > $R/ops_tests.log 2>&1; echo "ops_tests rc=$?"; grep -E "FAILED|PASSED|Failure" $R/ops_tests.log | head -10
$B/tests/models_tests --gtest_filter='GptTest.Cuda*' > $R/models_tests.log 2>&1; echo "models_tests rc=$?"; grep -E "FAILED|PASSED|Failure|rel|Expected" $R/models_tests.log | head -10
$B/bench/bench_ops_bench --repeats 20 --only classifier --csv $R/ops_head.csv > $R/ops_bench.log 2>&1; echo "bench rc=$?"; grep head $R/ops_head.csv
fi
wait $DATA; tail -3 $R/data.log
echo "data ready at $((SECONDS-T0)) s"
gpt() {  # name chunk batch accum
  rm -rf runs/cc/$1
  $B/trainer --config configs/gpt2-124m.yaml --set run.name=$1 --set run.output_dir=runs/cc \
    --set data.batch_size=$3 --set train.grad_accum_steps=$4 --set train.max_steps=${STEPS:-100} --set train.log_every=20 \
    --set train.eval_every=0 --set train.eval_batches=1 --set train.checkpoint_every=0 --set model.head_chunk_rows=$2 > $R/$1.log 2>&1
  echo "$1 rc=$? at $((SECONDS-T0)) s"
}
for c in ${B16_CHUNKS:-0 8192 4096 2048}; do gpt b16_c${c} $c 16 1; done
gpt b16_c0_again 0 16 1
for c in ${REC_CHUNKS:-0 4096 2048}; do gpt rec_c${c} $c 8 4; done
python3 - runs/cc <<'PY' | tee $R/summary.txt
import json, pathlib, statistics, sys
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"]
    s = [r for r in recs if r["kind"] == "summary"]
    tps = [r["tokens_per_s"] for r in train[1:]]
    print(f"{run.name}: median {statistics.median(tps):.0f} tokens/s over {len(tps)} windows, "
          f"losses {[round(r['loss'],4) for r in train]}, peak {s[-1].get('mem_peak_mib',0) if s else '?'} MiB")
PY
if [[ -n ${MEMCHECK:-} ]] && (( SECONDS - T0 < 470 )); then
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/ops_tests --gtest_filter='LmHeadLossCudaTest.MatchesTheReference' > $R/memcheck.log 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | tail -3
fi
if (( SECONDS - T0 < ${COMPILE_BY:-430} )); then
  timeout 150 python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes compile --accum 1 --batch 16 \
    --steps 40 --warmup 10 --csv $R/compile_b16.csv > $R/compile_b16.log 2>&1; cat $R/compile_b16.csv
fi
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $R/smi.txt
for r in runs/cc/*; do mkdir -p $R/runs/$(basename $r); cp $r/metrics.jsonl $r/config.yaml $R/runs/$(basename $r)/ 2>/dev/null; done; true
