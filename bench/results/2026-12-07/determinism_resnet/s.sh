#!/usr/bin/env bash
# 2026-12-07, second session: what of train.deterministic had not run on a GPU (the GPU tests landed
# in 8eed8c2/44027a1, ResNet-50 under the option, every suite's GPU tests on HEAD).
# Copied from ../determinism/s.sh; since: this header, the rnspeed step (call 4), RSTEPS 30. Calls:
#   1: FAST_ARCH=1 BUILD_TARGETS="trainer brrr_tokenize tests/models_tests" STEPS="build dtests dresnet" RPAIRS="1 2"
#   2: FAST_ARCH=1 BUILD_TARGETS="trainer brrr_tokenize tests/core_tests tests/ops_tests tests/data_tests
#      tests/models_tests tests/trainer_tests tests/report_tests tests/cli_tests" STEPS="build gputests"
#      (as run: RSTEPS=30 RPAIRS=3 ... STEPS="dresnet build gputests"; call 1's 20-step runs stopped at
#      a config error, warmup 20 >= 20 steps; the default is 30 since)
#   3: call3.sh (two default runs); 4 (expectations in expect2.md): FAST_ARCH=1 BUILD_TARGETS="trainer" STEPS="build rnspeed"
#      RPAIRS="1 2" RSPEED_STEPS=150
set -uo pipefail
B=build-gpu; R=/tmp/det; mkdir -p $R $OUT
trap "tar czf $OUT/det.tgz -C /tmp det" EXIT
T0=$SECONDS; LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/smi_$(date +%H%M%S).txt
echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) STEPS=${STEPS:-}" >> $R/dates.txt
gpt_run() {  # name, steps, log_every, extra --set args...
  local name=$1 steps=$2 every=$3; shift 3
  rm -rf runs/rc/$name
  timeout $(( $(left) - 3 )) $B/trainer --config configs/gpt2-124m.yaml --set run.name=$name \
    --set run.output_dir=runs/rc --set data.batch_size=16 --set train.grad_accum_steps=1 \
    --set train.max_steps=$steps --set train.log_every=$every --set train.eval_every=0 \
    --set train.eval_batches=1 --set model.fused=auto "$@" > $R/$name.log 2>&1
  echo "gpt $name rc=$? at $((SECONDS-T0)) s"
  mkdir -p $R/runs/$name; cp runs/rc/$name/metrics.jsonl runs/rc/$name/config.yaml $R/runs/$name/ 2>/dev/null
}
rn_run() {  # name, steps, log_every, batch, extra --set args...
  local name=$1 steps=$2 every=$3 batch=$4; shift 4
  rm -rf runs/rc/$name
  timeout $(( $(left) - 3 )) $B/trainer --config configs/blog/05_large_batch.yaml --set run.name=$name \
    --set run.output_dir=runs/rc --set data.batch_size=$batch --set train.max_steps=$steps \
    --set train.log_every=$every --set train.eval_every=0 "$@" > $R/$name.log 2>&1
  echo "resnet $name rc=$? at $((SECONDS-T0)) s"; grep -iE 'error|determin' $R/$name.log | head -3
  mkdir -p $R/runs/$name; cp runs/rc/$name/metrics.jsonl runs/rc/$name/config.yaml $R/runs/$name/ 2>/dev/null
}
for step in ${STEPS:-build opstests}; do
case $step in
build)
  if [[ "${FAST_ARCH:-0}" == 1 && ! -f $B/build.ninja ]]; then  # sm_90 (+100, 120) only: a shorter build
    TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRRR_CUDA_MIN_ARCH=90 \
      -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') > $R/cmake.log 2>&1
    echo "cmake rc=$? at $((SECONDS-T0)) s: $(grep 'architectures' $R/cmake.log)"
  fi
  BUILD_TARGETS=${BUILD_TARGETS:-"tests/ops_tests bench/bench_ops_bench trainer brrr_tokenize"} \
    BUDGET_S=$(( $(left) - 5 )) OUT=$R/gc_build BUILD_DIR=$B bash scripts/gpu_check.sh build > $R/build.log 2>&1
  echo "build rc=$? at $((SECONDS-T0)) s"; grep -E 'error|FAILED' $R/build.log | head -20
  rm -rf $R/gc_build/results.tgz ;;
opstests)
  timeout 150 $B/tests/ops_tests --gtest_filter='*Gpu*:*GPU*:*Cuda*:*CUDA*:*Fused*' --gtest_brief=1 > $R/opstests.log 2>&1
  echo "ops_tests rc=$? at $((SECONDS-T0)) s: $(grep -E 'PASSED|FAILED' $R/opstests.log | tail -3 | tr '\n' ' ')" ;;
memcheck)
  for tool in ${TOOLS:-memcheck synccheck}; do
    (( $(left) < 100 )) && { echo "$tool skipped"; continue; }
    timeout 140 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/ops_tests \
      --gtest_filter='*Cuda*' --gtest_brief=1 > $R/$tool.log 2>&1
    echo "$tool rc=$? at $((SECONDS-T0)) s: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $R/$tool.log | tail -3 | tr '\n' ' ')"
  done ;;
ops)
  for sweep in ${SWEEPS:-1}; do
    timeout $(( $(left) - 3 )) $B/bench/bench_ops_bench --repeats ${REPEATS:-20} ${ONLY:+--only $ONLY} \
      --csv $R/ops_brrr_s$sweep.csv > $R/ops_brrr_s$sweep.log 2>&1
    echo "bench_ops_bench sweep $sweep rc=$? at $((SECONDS-T0)) s"
  done ;;
torchops)
  timeout $(( $(left) - 3 )) python3 bench/torch_ops.py --repeats ${REPEATS:-20} ${ONLY:+--only $ONLY} \
    --csv $R/ops_torch.csv > $R/ops_torch.log 2>&1
  echo "torch_ops rc=$? at $((SECONDS-T0)) s" ;;
gpt)
  [[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $R/data.log 2>&1
  for g in ${GRAPHS:-auto}; do gpt_run gpt_graph_$g ${GSTEPS:-220} 20 --set train.cuda_graph=$g; done
  (( $(left) < 150 )) && { echo "torch_gpt2 skipped: $(left) s left"; continue; }
  timeout $(( $(left) - 3 )) python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin \
    --modes ${TMODES:-eager,compile} --accum 1 --batch 16 --steps 40 --warmup 10 --csv $R/torch_gpt2_b16.csv > $R/torch_gpt2.log 2>&1
  echo "torch_gpt2 rc=$? at $((SECONDS-T0)) s"; cat $R/torch_gpt2_b16.csv
  python3 bench/summarize_runs.py $R/runs | tee $R/runs.txt ;;
det)
  [[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $R/data.log 2>&1
  for a in ${ATTN:-auto math}; do
    for k in 1 2; do gpt_run det_${a}_$k ${DSTEPS:-30} 1 --set model.attention=$a --set train.cuda_graph=${DGRAPH:-auto}; done
  done
  python3 - $R/runs <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
def recs(n):
    p = d / n / "metrics.jsonl"
    return [json.loads(l) for l in p.open() if '"train"' in l] if p.exists() else []
for a in sorted({p.name.split("_")[1] for p in d.glob("det_*")}):
    r1, r2 = recs(f"det_{a}_1"), recs(f"det_{a}_2")
    diff = [x["step"] for x, y in zip(r1, r2) if (x["loss"], x["grad_norm"]) != (y["loss"], y["grad_norm"])]
    print(f"attention {a}: {len(r1)}/{len(r2)} steps logged, first differing step {diff[0] if diff else None}, "
          f"{len(diff)} differ; last loss {r1[-1]['loss'] if r1 else None!r} vs {r2[-1]['loss'] if r2 else None!r}")
PY
  ;;
dtests)  # train.deterministic's GPU tests, and the GPT CUDA tests beside them
  timeout 200 $B/tests/models_tests --gtest_filter='*Cuda*' --gtest_brief=1 > $R/dtests.log 2>&1
  echo "models_tests Cuda rc=$? at $((SECONDS-T0)) s: $(grep -E 'PASSED|FAILED' $R/dtests.log | tail -4 | tr '\n' ' ')" ;;
dprobe)  # which attention backward is reproducible, with and without deterministic algorithms
  CUBLAS_WORKSPACE_CONFIG=:4096:8 timeout 120 python3 bench/attention_determinism.py --repeats 10 \
    --csv $R/attention_determinism.csv > $R/attention_determinism.log 2>&1
  echo "attention_determinism rc=$? at $((SECONDS-T0)) s"; cat $R/attention_determinism.log ;;
dgpt)  # train.deterministic: two runs equal step for step; its speed against the default, same call
  [[ -s data_cache/fortunes_train.bin ]] || BUILD_DIR=$B scripts/prepare_data.sh tokens > $R/data.log 2>&1
  for k in 1 2; do gpt_run detmode_$k ${DSTEPS:-30} 1 --set train.deterministic=true; done
  python3 - $R/runs <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
r1, r2 = ([json.loads(l) for l in (d / f"detmode_{k}" / "metrics.jsonl").open() if '"train"' in l] for k in (1, 2))
diff = [x["step"] for x, y in zip(r1, r2) if (x["loss"], x["grad_norm"]) != (y["loss"], y["grad_norm"])]
print(f"train.deterministic: {len(r1)}/{len(r2)} steps logged, {len(diff)} differ (first {diff[:1]}); "
      f"last loss {r1[-1]['loss']!r} vs {r2[-1]['loss']!r}")
PY
  for pair in ${PAIRS:-1}; do
    for det in true false; do gpt_run speed_det${det}_$pair ${GSTEPS:-220} 20 --set train.deterministic=$det; done
  done
  python3 bench/summarize_runs.py $R/runs | grep -E 'detmode|speed' | tee $R/dgpt.txt ;;
dresnet)  # train.deterministic on ResNet-50 (blog rung 5, JPEGs): two runs equal, and its speed
  [[ -f data_cache/photos/.complete ]] || { BUILD_DIR=$B scripts/prepare_data.sh photos > $R/photos.log 2>&1;
    echo "photos rc=$? at $((SECONDS-T0)) s"; }
  for k in 1 2; do
    rn_run rn_detmode_$k ${RSTEPS:-30} 1 64 --set train.deterministic=true
  done
  python3 - $R/runs <<'PY2'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
r1, r2 = ([json.loads(l) for l in (d / f"rn_detmode_{k}" / "metrics.jsonl").open() if '"train"' in l] for k in (1, 2))
diff = [x["step"] for x, y in zip(r1, r2) if (x["loss"], x["grad_norm"]) != (y["loss"], y["grad_norm"])]
print(f"resnet train.deterministic: {len(r1)}/{len(r2)} steps logged, {len(diff)} differ (first {diff[:1]}); "
      f"last loss {r1[-1]['loss']!r} vs {r2[-1]['loss']!r}")
PY2
  for pair in ${RPAIRS:-1}; do
    for det in true false; do rn_run rn_speed_det${det}_$pair ${RSPEED_STEPS:-100} 10 256 --set train.deterministic=$det; done
  done
  python3 bench/summarize_runs.py $R/runs | grep -E '^rn_' | tee $R/dresnet.txt ;;
rnspeed)  # ResNet-50 det vs default at batch 64 too, eager and graphed (rung 6's step): the pairs interleaved
  [[ -f data_cache/photos/.complete ]] || BUILD_DIR=$B scripts/prepare_data.sh photos > $R/photos.log 2>&1
  for pair in ${RPAIRS:-1}; do for g in ${RGRAPHS:-false auto}; do for det in true false; do
    rn_run rn_b64_g${g}_det${det}_$pair ${RSPEED_STEPS:-100} 10 64 --set train.deterministic=$det --set train.cuda_graph=$g
  done; done; done
  python3 bench/summarize_runs.py $R/runs | grep -E '^rn_b64' | tee $R/rnspeed.txt ;;
gputests)  # every GPU test of every suite (gpu_check.sh's tests stage), on the build above
  BUDGET_S=$(( $(left) - 5 )) OUT=$R/gc_tests BUILD_DIR=$B bash scripts/gpu_check.sh tests > $R/gputests.log 2>&1
  echo "gpu_check tests rc=$? at $((SECONDS-T0)) s"
  grep -E '^\+ |PASSED|FAILED|ERROR SUMMARY|no .*_tests built' $R/gputests.log | tail -40 ;;
esac
done
echo "all done at $((SECONDS-T0)) s"
