#!/usr/bin/env bash
# On an H200: the PDL A/B of the column sum (switch patch) and the chunked head against torch.compile.
# On anything else: the whole tree's GPU tests (gpu_check.sh build tests).
set -uo pipefail
export PYTHONUNBUFFERED=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "device: $name"
if [[ $name != *H200* ]]; then
  BUILD_TARGETS="tests/ops_tests" BUDGET_S=300 OUT=$OUT/gc BUILD_DIR=build-gpu bash scripts/gpu_check.sh build > /dev/null 2>&1
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/ops_tests --gtest_filter='*Cuda*' --gtest_brief=1 > $OUT/memcheck.log 2>&1
  echo "memcheck rc=$?"; tail -5 $OUT/memcheck.log; exit 0
fi
B=build-gpu; R=/tmp/h2; rm -rf $R; mkdir -p $R $OUT/gc
trap 'rm -f $R/build.log; tar czf $OUT/h2.tgz -C /tmp h2' EXIT
T0=$SECONDS
git apply scratch/pdl/switch.patch && echo "switch patch applied"
{ date -u +%FT%TZ; echo ${BRRR_COMMIT:-}; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; } > $R/meta.txt
BUILD_TARGETS="trainer tests/ops_tests bench/bench_ops_bench brrr_tokenize" BUDGET_S=400 OUT=$OUT/gc BUILD_DIR=$B bash scripts/gpu_check.sh build > $R/build.log 2>&1
echo "build done at $((SECONDS-T0)) s"; [[ -x $B/trainer && -x $B/bench/bench_ops_bench ]] || { tail -30 $OUT/gc/logs/build.log; exit 1; }
( [[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $R/data.log 2>&1 ) &
DATA=$!
for p in 1 0; do
  BRRR_COLSUM_PDL=$p $B/tests/ops_tests --gtest_filter='LinearBias*' > $R/tests_p$p.log 2>&1
  echo "tests pdl $p rc=$? $(grep -E '^\[  PASSED|FAILED TEST' $R/tests_p$p.log | head -2 | tr '\n' ' ')"
done
for sweep in 1 2 3; do
  for p in 1 0; do
    BRRR_COLSUM_PDL=$p $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad,wgrad_bgrad --csv $R/b_s${sweep}_p$p.csv > $R/b_s${sweep}_p$p.log 2>&1
    echo "sweep $sweep pdl $p: $(grep -E 'bias_grad_768,(brrr_graph_per_call|copy_half_graph_per_call)|attn_c_proj,separate|ceil' $R/b_s${sweep}_p$p.csv | cut -d, -f1,2,4,5 | tr '\n' ' ')"
  done
done
wait $DATA; echo "data ready at $((SECONDS-T0)) s"
gpt() {  # name chunk
  rm -rf runs/h2/$1
  $B/trainer --config configs/gpt2-124m.yaml --set run.name=$1 --set run.output_dir=runs/h2 \
    --set data.batch_size=16 --set train.grad_accum_steps=1 --set train.max_steps=100 --set train.log_every=20 \
    --set train.eval_every=0 --set train.eval_batches=1 --set train.checkpoint_every=0 --set model.head_chunk_rows=$2 > $R/$1.log 2>&1
  echo "$1 rc=$? at $((SECONDS-T0)) s"
}
gpt b16_c0 0
gpt b16_c4096 4096
if (( SECONDS - T0 < 440 )); then
  timeout 125 python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes compile --accum 1 --batch 16 \
    --steps 40 --warmup 10 --csv $R/compile_b16.csv > $R/compile_b16.log 2>&1; echo "compile rc=$? at $((SECONDS-T0)) s"; tail -3 $R/compile_b16.log
fi
python3 - runs/h2 <<'PY' | tee $R/summary.txt
import json, pathlib, statistics, sys
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"]
    s = [r for r in recs if r["kind"] == "summary"]
    tps = [r["tokens_per_s"] for r in train[1:]]
    print(f"{run.name}: median {statistics.median(tps):.0f} tokens/s over {len(tps)} windows, "
          f"peak {s[-1].get('mem_peak_mib',0) if s else '?'} MiB")
PY
for r in runs/h2/*; do mkdir -p $R/runs/$(basename $r); cp $r/metrics.jsonl $r/config.yaml $R/runs/$(basename $r)/ 2>/dev/null; done; true
