#!/usr/bin/env bash
# Every fused-op kernel as a programmatic dependent launch: BRRR_PDL=1 (on) against BRRR_PDL=0
# (plain launches, as on main; sum_partials stays dependent either way, as on main), same build.
#   STEPS="build bench tests memcheck gpt"  SWEEPS="1"  PAIRS="1 2"  LIMIT=585
set -uo pipefail
B=build-gpu; R=/tmp/p2; mkdir -p $R $OUT
trap "tar czf $OUT/p2.tgz -C /tmp p2" EXIT
T0=$SECONDS; LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/smi_$(date +%H%M%S).txt
date -u +%FT%TZ >> $R/dates.txt
for step in ${STEPS:-build bench}; do
case $step in
build)
  BUDGET_S=$(( $(left) - 5 )) OUT=$R/gc_build BUILD_DIR=$B bash scripts/gpu_check.sh build > $R/build.log 2>&1
  echo "build rc=$? at $((SECONDS-T0)) s"; grep -E 'error|FAILED' $R/build.log | head -20
  rm -rf $R/gc_build/results.tgz ;;
bench)
  for sweep in ${SWEEPS:-1}; do
    for p in ${ORDER:-1 0}; do
      (( $(left) < ${BENCH_S:-70} )) && { echo "bench sweep $sweep pdl $p skipped: $(left) s left"; continue; }
      BRRR_PDL=$p timeout $(( $(left) - 3 )) $B/bench/bench_ops_bench --repeats ${REPEATS:-20} \
        --only ${ONLY:-classifier,residual_layernorm,residual_bias,bias_gelu,bias_grad,image_input,mlp_gelu,wgrad_bgrad} \
        --csv $R/b_s${sweep}_p$p.csv > $R/b_s${sweep}_p$p.log 2>&1
      echo "bench sweep $sweep pdl $p rc=$? at $((SECONDS-T0)) s"
    done
  done ;;
tests)
  (( $(left) < 200 )) && { echo "tests skipped: $(left) s left"; continue; }
  BRRR_PDL=1 STAGE_BUDGET_TESTS=$(( $(left) - 10 )) BUDGET_S=$(( $(left) - 5 )) OUT=$R/gc_tests BUILD_DIR=$B \
    bash scripts/gpu_check.sh tests > $R/tests.log 2>&1
  echo "tests rc=$? at $((SECONDS-T0)) s"
  tail -25 $R/tests.log ;;
opstests)
  BRRR_PDL=1 timeout 150 $B/tests/ops_tests --gtest_filter='*Gpu*:*GPU*:*Cuda*:*CUDA*:*Fused*' --gtest_brief=1 > $R/opstests.log 2>&1
  echo "ops_tests rc=$? at $((SECONDS-T0)) s: $(grep -E 'PASSED|FAILED' $R/opstests.log | tail -3 | tr '\n' ' ')" ;;
memcheck)
  for tool in ${TOOLS:-synccheck}; do
    (( $(left) < 100 )) && { echo "$tool skipped"; continue; }
    BRRR_PDL=1 timeout 140 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/ops_tests \
      --gtest_filter='*Cuda*' --gtest_brief=1 > $R/$tool.log 2>&1
    echo "$tool rc=$? at $((SECONDS-T0)) s: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $R/$tool.log | tail -3 | tr '\n' ' ')"
  done ;;
gpt)
  [[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $R/data.log 2>&1
  for pair in ${PAIRS:-1 2}; do
    for p in ${ORDER:-1 0}; do
      (( $(left) < 45 )) && { echo "gpt pair $pair pdl $p skipped"; continue; }
      name=gpt_p${pair}_pdl$p; rm -rf runs/p2/$name
      BRRR_PDL=$p timeout $(( $(left) - 3 )) $B/trainer --config configs/gpt2-124m.yaml --set run.name=$name \
        --set run.output_dir=runs/p2 --set data.batch_size=16 --set train.grad_accum_steps=1 \
        --set train.max_steps=${GSTEPS:-220} --set train.log_every=20 --set train.eval_every=0 \
        --set train.eval_batches=1 --set model.fused=auto --set train.cuda_graph=${GRAPH:-auto} > $R/$name.log 2>&1
      echo "gpt $name rc=$? at $((SECONDS-T0)) s"
      mkdir -p $R/runs/$name; cp runs/p2/$name/metrics.jsonl runs/p2/$name/config.yaml $R/runs/$name/ 2>/dev/null
    done
  done
  python3 bench/summarize_runs.py $R/runs | tee $R/runs.txt ;;
esac
done
# Summary: brrr rows of both settings side by side.
python3 - $R <<'PY'
import csv, glob, sys, collections
R = sys.argv[1]; rows = collections.defaultdict(dict)
for f in sorted(glob.glob(f"{R}/b_s*_p*.csv")):
    s, p = f.split("_s")[1].split(".csv")[0].split("_p")
    for r in csv.DictReader(open(f)):
        rows[(r["op"], r["impl"], r["pass"])][(int(s), int(p))] = float(r["ms"])
for k, v in rows.items():
    on = [v[x] for x in sorted(v) if x[1] == 1]; off = [v[x] for x in sorted(v) if x[1] == 0]
    if on and off:
        mo, mf = min(on), min(off)
        print(f"{k[0]:>28} {k[1]:>34} {k[2]:>8}  on {mo*1000:8.2f} us  off {mf*1000:8.2f} us  d {1000*(mo-mf):+6.2f} us")
PY
echo "all done at $((SECONDS-T0)) s"
