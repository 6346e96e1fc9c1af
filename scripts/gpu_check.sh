#!/usr/bin/env bash
# The one script run on the GPU machine: build, GPU tests, data, benchmarks, blog ladder.
#
#   scripts/gpu_check.sh [build] [tests] [data] [loader] [resnet] [gpt] [gptprof] [fusedprof]
#                        [recipe] [autotune] [resnet64] [fused] [blog] [ddp1] [scaling]
#                        [scaling_resnet] [drill] [graphtests] [graph_gpt] [graph_resnet]
#                        [blog_graph] [graphprof]
#                        (none: build tests data loader resnet gpt blog, in order)
#
# Each stage runs under its own time limit (seconds, env STAGE_BUDGET_<NAME>), and the whole call
# keeps within BUDGET_S (default 560 s, under the 10-minute limit of one call): a stage that no
# longer fits is skipped and reported. Stages build and prepare what they need incrementally
# (ninja is a no-op when nothing changed; data is skipped when present), so a call may run any
# subset on a machine that kept (or lost) the previous call's build.
#
# Output, under $OUT (default ./gpu_out):
#   results.tgz   logs/*.log (one per stage) and results/: meta.txt (date, commit, device, host),
#                 commands.txt (every command with its time), stages.txt, CSVs, run metrics
#                 (metrics.jsonl, gpu.jsonl, config.yaml; no checkpoints), PNG timelines, tables
#   summary.txt   the final tables (bench/summarize_gpu_check.py), also printed last on stdout
# The tarball is written by an EXIT trap, so a failing stage still returns its logs.
#
# Environment: BRRR_COMMIT (recorded when .git is absent), FULL_TESTS=1 (also the whole ctest
# suite), RESNET_COMPILE=1 (also torch.compile in the ResNet comparison), GPT_COMPILE=0 (skip the
# torch.compile GPT runs), GPT_HF=0 (skip the Hugging Face Trainer run), BUILD_TARGETS (ninja
# targets of the build stage; default all), GPT_TORCH_STEPS (60), LOADER_WORKERS (default 0,1,2,4,8,16), BUILD_DIR (default build-gpu).
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu_out}
BUILD_DIR=${BUILD_DIR:-build-gpu}
BUDGET_S=${BUDGET_S:-560}
LOG=$OUT/logs
RES=$OUT/results
mkdir -p "$LOG" "$RES"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1 BUILD_DIR
T0=$SECONDS

# ---- bookkeeping ----------------------------------------------------------------------------
commit=${BRRR_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "date:    $(date -u +%FT%TZ)"
  echo "commit:  $commit"
  echo "device:  $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
  echo "host:    $(hostname), $(nproc) cpus, $(uname -r)"
  echo "torch:   $(python3 -c 'import torch;print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null)"
  echo "stages:  ${*:-all}"
} > "$RES/meta.txt"

# Runs a command, appending it (with its time and stage) to commands.txt; output goes to stdout.
run() {
  echo "$(date -u +%FT%TZ) [$STAGE] $*" >> "$RES/commands.txt"
  echo "+ $*"
  "$@"
}

# Copies a run directory's records (not its checkpoints) into the results.
keep_run() {
  local src=$1 dst=$2
  mkdir -p "$dst"
  for f in metrics.jsonl gpu.jsonl config.yaml; do
    [[ -f "$src/$f" ]] && cp "$src/$f" "$dst/"
  done
  return 0
}

finish() {
  local rc=$?
  trap - EXIT INT TERM
  STAGE=summary
  python3 bench/summarize_gpu_check.py "$RES" --out "$OUT/summary.txt" > /dev/null 2>> "$LOG/summary.log"
  # Keep the tarball under the 16 MiB a file may have: drop any single file over 4 MiB (named).
  find "$LOG" "$RES" -type f -size +4M -printf '%p (%s bytes) left out of results.tgz\n' \
    -delete >> "$OUT/summary.txt"
  tar -czf "$OUT/results.tgz" -C "$OUT" logs results
  rm -rf "$LOG" "$RES"
  echo
  echo "==================== summary ($(( SECONDS - T0 )) s; everything in $OUT/results.tgz) ===================="
  cat "$OUT/summary.txt"
  exit $rc
}
trap finish EXIT
trap 'exit 130' INT TERM

# ---- stages ---------------------------------------------------------------------------------
stage_build() {
  local prefix
  prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    run cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" || return 1
  fi
  # BUILD_TARGETS (e.g. "trainer"): only those, for a call that runs no tests or benchmarks.
  # shellcheck disable=SC2086
  run ninja -C "$BUILD_DIR" -j16 -k 0 ${BUILD_TARGETS:-}
}

stage_tests() {
  local rc=0 suite filter
  run python3 tests/golden/make_all.py --out "$BUILD_DIR/golden" || rc=1
  for suite in core ops data models trainer report cli; do
    [[ -x "$BUILD_DIR/tests/${suite}_tests" ]] || { echo "no ${suite}_tests built"; rc=1; continue; }
    filter='*Gpu*:*GPU*:*Cuda*:*CUDA*:*Pinned*:*Prefetch*:*Device*:*Autocast*:*Fused*:*Nvml*:*Monitor*'
    if ! run "$BUILD_DIR/tests/${suite}_tests" --gtest_filter="$filter" --gtest_brief=1; then
      rc=1
      # Again, every test named, and under gdb when there is one: which test, and where it died.
      if command -v gdb >/dev/null; then
        run gdb -q -batch -ex run -ex bt -ex "info threads" --args \
          "$BUILD_DIR/tests/${suite}_tests" --gtest_filter="$filter" 2>&1 | tail -120
      else  # tests/test_support.cpp prints the test and the stack; name the frames
        run "$BUILD_DIR/tests/${suite}_tests" --gtest_filter="$filter" > "$LOG/${suite}_crash.txt" 2>&1
        sed -n '/fatal signal/,/^maps:/p' "$LOG/${suite}_crash.txt" | head -60
        python3 scripts/symbolize_crash.py "$LOG/${suite}_crash.txt" | tee "$LOG/${suite}_crash_symbols.txt"
      fi
    fi
  done
  # The op kernels under compute-sanitizer (memcheck: out-of-bounds and misaligned accesses).
  if command -v compute-sanitizer >/dev/null && [[ -x "$BUILD_DIR/tests/ops_tests" ]]; then
    run timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
      "$BUILD_DIR/tests/ops_tests" --gtest_filter='*Cuda*' --gtest_brief=1 || rc=1
  fi
  if [[ "${FULL_TESTS:-0}" == 1 ]]; then
    run ctest --test-dir "$BUILD_DIR" -j8 --output-on-failure --timeout 300 || rc=1
  fi
  return $rc
}

stage_data() {
  run scripts/prepare_data.sh tokens photos
}

need_data() {  # the stages below make their data if an earlier call (or machine) did not
  [[ -s data_cache/fortunes_train.bin && -f data_cache/photos/.complete ]] || stage_data
}

stage_loader() {
  need_data || return 1
  local d=$RES/loader workers=${LOADER_WORKERS:-0,1,2,4,8,16} rc=0
  mkdir -p "$d"
  run "$BUILD_DIR/bench/bench_loader_bench" --root data_cache/photos --workers "$workers" \
    --batch 64 --batches 40 --warmup 8 --csv "$d/brrr_loader.csv" || rc=1
  run python3 bench/torch_loader_bench.py --root data_cache/photos --workers "$workers" \
    --batch 64 --batches 40 --warmup 8 --decoder torchvision --csv "$d/torch_loader.csv" || rc=1
  run python3 bench/compare_loaders.py "$d/brrr_loader.csv" "$d/torch_loader.csv" \
    --out "$d/compare.md" || rc=1
  return $rc
}

stage_resnet() {
  need_data || return 1
  local d=$RES/resnet rc=0 b
  mkdir -p "$d/runs"
  run "$BUILD_DIR/bench/bench_resnet_step_bench" --batches 64,256 --steps 30 --warmup 10 \
    --channels-last both --csv "$d/brrr_step.csv" || rc=1
  local compile=()
  [[ "${RESNET_COMPILE:-0}" == 1 ]] && compile=(--compile)
  run python3 bench/torch_resnet_step.py --batches 64,256 --steps 30 --warmup 10 \
    --channels-last both "${compile[@]}" --csv "$d/torch_step.csv" || rc=1
  for b in 64 256; do  # the trainer from JPEGs, fed by 16 workers (05_large_batch, batch b)
    rm -rf "runs/gpu_check/resnet_jpeg_b$b"
    run "$BUILD_DIR/trainer" --config configs/blog/05_large_batch.yaml \
      --set run.name="resnet_jpeg_b$b" --set run.output_dir=runs/gpu_check \
      --set data.batch_size=$b --set train.max_steps=$(( b == 64 ? 300 : 120 )) || rc=1
    keep_run "runs/gpu_check/resnet_jpeg_b$b" "$d/runs/resnet_jpeg_b$b"
  done
  return $rc
}

stage_gpt() {
  need_data || return 1
  local d=$RES/gpt rc=0 a
  mkdir -p "$d/runs"
  for a in 1 4; do
    rm -rf "runs/gpu_check/gpt2_accum$a"
    run "$BUILD_DIR/trainer" --config configs/gpt2-124m.yaml --set run.name="gpt2_accum$a" \
      --set run.output_dir=runs/gpu_check --set train.grad_accum_steps=$a \
      --set train.max_steps=$(( a == 1 ? 200 : 50 )) --set train.eval_every=0 \
      --set train.eval_batches=2 || rc=1
    keep_run "runs/gpu_check/gpt2_accum$a" "$d/runs/gpt2_accum$a"
  done
  local modes=eager,compile
  [[ "${GPT_COMPILE:-1}" == 0 ]] && modes=eager
  # 60 timed steps (about 2 s at accumulation 1): a 15-step window moved by 10 % between calls.
  run python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes "$modes" \
    --accum 1,4 --steps "${GPT_TORCH_STEPS:-60}" --warmup 10 --matmul-peak \
    --csv "$d/torch_gpt2.csv" || rc=1
  if [[ "${GPT_HF:-1}" == 1 ]]; then
    run python3 bench/hf_gpt2.py --tokens data_cache/fortunes_train.bin --max-steps 30 \
      --warmup 10 --csv "$d/hf_gpt2.csv" || rc=1
  fi
  return $rc
}

# Kernel-level comparison of one GPT-2 step: Kineto traces of 3 steps of brrr and of PyTorch,
# summed by kernel name (bench/trace_kernels.py).
#   profile_gpt DIR BATCH FUSED TORCH_MODE: brrr at micro-batch BATCH with model.fused=FUSED
#   against bench/torch_gpt2.py in TORCH_MODE (eager or compile), both at accumulation 1.
profile_gpt() {
  set -o pipefail
  local d=$1 batch=$2 fused=$3 mode=$4 rc=0 name
  name=gpt2_prof_$(basename "$d")
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  mkdir -p "$d"
  rm -rf "runs/gpu_check/$name"
  run "$BUILD_DIR/trainer" --config configs/gpt2-124m.yaml --set run.name="$name" \
    --set run.output_dir=runs/gpu_check --set data.batch_size="$batch" \
    --set train.grad_accum_steps=1 --set train.max_steps=40 --set train.log_every=20 \
    --set train.eval_every=0 --set train.eval_batches=1 --set model.fused="$fused" \
    --set train.profile.start_step=25 --set train.profile.steps=3 2>&1 | tail -3 || rc=1
  cp "runs/gpu_check/$name/trace.json" "$d/brrr.json" 2>/dev/null
  keep_run "runs/gpu_check/$name" "$d/runs/$name"
  run python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes "$mode" \
    --accum 1 --batch "$batch" --steps 10 --warmup 10 --profile "$d" --profile-steps 3 || rc=1
  run python3 bench/trace_kernels.py --steps 3 "$mode=$d/${mode}_accum1.json" \
    brrr="$d/brrr.json" --top 70 | tee "$d/kernels.md" || rc=1
  gzip -f "$d"/*.json
  return $rc
}

# brrr's unfused step against PyTorch eager (micro-batch 8, the config's).
stage_gptprof() { profile_gpt "$RES/gptprof" 8 false eager; }

# The fused step against torch.compile's at B=16: where compile is still ahead.
stage_fusedprof() { profile_gpt "$RES/fusedprof" 16 auto compile; }

# The article recipe (8 x 1024 tokens, accumulation 4) in one call: the GPT ladder's rungs 4
# (unfused ATen), 5 (the fused ops) and 6 (the fused step as one CUDA graph) against PyTorch eager
# and torch.compile and the Hugging Face Trainer with torch_compile.
stage_recipe() {
  set -o pipefail
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  local d=$RES/recipe rc=0 r
  mkdir -p "$d"
  run env TRAINER="$BUILD_DIR/trainer" RUNS_DIR=runs/blog REPORT_DIR="$d/blog" \
    LOG_DIR="$LOG/blog" scripts/run_blog.sh gpt_04_accum gpt_05_fused gpt_06_cuda_graph || rc=1
  for r in runs/blog/blog_gpt_04_accum runs/blog/blog_gpt_05_fused runs/blog/blog_gpt_06_cuda_graph; do
    [[ -d "$r" ]] && keep_run "$r" "$d/runs/$(basename "$r")"
  done
  cat "$d/blog/blog_table.md" 2>/dev/null
  run python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes eager,compile \
    --accum 4 --batch 8 --steps 20 --warmup 10 --csv "$d/torch_gpt2_recipe.csv" || rc=1
  run python3 bench/hf_gpt2.py --tokens data_cache/fortunes_train.bin --max-steps 30 \
    --warmup 10 --csv "$d/hf_gpt2.csv" || rc=1
  cat "$d/torch_gpt2_recipe.csv" "$d/hf_gpt2.csv" 2>/dev/null
  return $rc
}

# The ResNet-50 ladder's last rungs: 5 (batch 256, 16 workers) and 6 (batch 64 with the step as
# one CUDA graph), with the blog table and GPU-utilisation timelines.
stage_blog_graph() {
  need_data || return 1
  local rc=0 r
  run env TRAINER="$BUILD_DIR/trainer" RUNS_DIR=runs/blog REPORT_DIR="$RES/blog_graph" \
    LOG_DIR="$LOG/blog_graph" scripts/run_blog.sh 05_large_batch 06_cuda_graph || rc=1
  for r in runs/blog/blog_05_large_batch runs/blog/blog_06_cuda_graph; do
    [[ -d "$r" ]] && keep_run "$r" "$RES/blog_graph/runs/$(basename "$r")"
  done
  cat "$RES/blog_graph/blog_table.md" 2>/dev/null
  return $rc
}

# ResNet-50 bf16 NHWC at batch 64: the step ceiling and the trainer from JPEGs with 16 and 6 workers
# (and auto) side by side, and a Kineto trace of the 16-worker run (GPU kernel time vs span of 3 steps).
stage_resnet64() {
  need_data || return 1
  local d=$RES/resnet64 rc=0 w
  mkdir -p "$d/runs"
  run "$BUILD_DIR/bench/bench_resnet_step_bench" --batches 64 --steps 60 --warmup 10 \
    --channels-last true --csv "$d/brrr_step.csv" || rc=1
  for w in 16 6 auto; do
    rm -rf "runs/gpu_check/r64_w$w"
    run "$BUILD_DIR/trainer" --config configs/blog/05_large_batch.yaml --set run.name="r64_w$w" \
      --set run.output_dir=runs/gpu_check --set data.batch_size=64 --set data.num_workers=$w \
      --set train.max_steps=300 || rc=1
    keep_run "runs/gpu_check/r64_w$w" "$d/runs/r64_w$w"
  done
  rm -rf runs/gpu_check/r64_prof
  run "$BUILD_DIR/trainer" --config configs/blog/05_large_batch.yaml --set run.name=r64_prof \
    --set run.output_dir=runs/gpu_check --set data.batch_size=64 --set train.max_steps=160 \
    --set train.log_every=50 --set train.profile.start_step=140 --set train.profile.steps=3 || rc=1
  cp runs/gpu_check/r64_prof/trace.json "$d/r64_prof.json" 2>/dev/null
  run python3 bench/trace_kernels.py --steps 3 brrr="$d/r64_prof.json" --top 25 | tee "$d/kernels.md"
  gzip -f "$d"/*.json
  python3 - "$d" <<'PY'
import json, pathlib, statistics, sys
d = pathlib.Path(sys.argv[1])
for run in sorted((d / "runs").iterdir()):
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open() if '"train"' in l][1:]
    sps = [r["samples_per_s"] for r in recs]
    print(f"{run.name}: median {statistics.median(sps):.0f} images/s over {len(sps)} windows, "
          f"max {max(sps):.0f}, min {min(sps):.0f}")
PY
  cat "$d/brrr_step.csv"
  return $rc
}

# data.num_workers: auto and data.batch_size: auto on the GPU: what each chose and why.
stage_autotune() {
  set -o pipefail  # a failing trainer fails the stage through `| tee`
  need_data || return 1
  local d=$RES/autotune rc=0 name
  mkdir -p "$d"
  local b
  for b in 256 64; do  # the count chosen must leave no data wait (steady data_wait_pct in the summary)
    rm -rf "runs/gpu_check/auto_workers_b$b"
    run "$BUILD_DIR/trainer" --config configs/blog/05_large_batch.yaml --set run.name="auto_workers_b$b" \
      --set run.output_dir=runs/gpu_check --set data.num_workers=auto --set data.batch_size=$b \
      --set train.max_steps=$(( b == 64 ? 200 : 60 )) 2>&1 | tee "$d/auto_workers_b$b.log" || rc=1
  done
  rm -rf runs/gpu_check/auto_batch_resnet runs/gpu_check/auto_batch_gpt
  run "$BUILD_DIR/trainer" --config configs/blog/04_bf16.yaml --set run.name=auto_batch_resnet \
    --set run.output_dir=runs/gpu_check --set data.batch_size=auto --set data.num_workers=16 \
    --set train.max_steps=40 --set schedule.warmup_steps=5 2>&1 | tee "$d/auto_batch_resnet.log" || rc=1
  run "$BUILD_DIR/trainer" --config configs/gpt2-124m.yaml --set run.name=auto_batch_gpt \
    --set run.output_dir=runs/gpu_check --set data.batch_size=auto --set train.grad_accum_steps=1 \
    --set train.max_steps=40 --set schedule.warmup_steps=5 --set train.eval_every=0 \
    --set train.eval_batches=1 2>&1 | tee "$d/auto_batch_gpt.log" || rc=1
  for name in auto_workers_b256 auto_workers_b64 auto_batch_resnet auto_batch_gpt; do
    keep_run "runs/gpu_check/$name" "$d/runs/$name"
  done
  grep -h "auto ->\|^.*done:" "$d"/*.log > "$d/choices.txt"
  cat "$d/choices.txt"
  return $rc
}

# The fused-op path (brrr::ops): each op against the eager ATen sequence it replaces and against
# torch.compile's kernel for the same op and shapes; then the whole GPT-2 124M step at B=16,
# T=1024, bf16: brrr fused vs brrr unfused vs PyTorch eager and torch.compile, same call.
stage_fused() {
  set -o pipefail
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  local d=$RES/fused rc=0 f
  mkdir -p "$d/runs"
  run "$BUILD_DIR/bench/bench_ops_bench" --repeats 20 --csv "$d/ops_brrr.csv" || rc=1
  run python3 bench/torch_ops.py --repeats 20 --csv "$d/ops_torch.csv" || rc=1
  for f in auto false; do
    rm -rf "runs/gpu_check/gpt2_b16_fused_$f"
    run "$BUILD_DIR/trainer" --config configs/gpt2-124m.yaml --set run.name="gpt2_b16_fused_$f" \
      --set run.output_dir=runs/gpu_check --set data.batch_size=16 --set train.grad_accum_steps=1 \
      --set train.max_steps=100 --set train.log_every=20 --set train.eval_every=0 \
      --set train.eval_batches=1 --set model.fused=$f 2>&1 | tail -4 || rc=1
    keep_run "runs/gpu_check/gpt2_b16_fused_$f" "$d/runs/gpt2_b16_fused_$f"
  done
  run python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes eager,compile \
    --accum 1 --batch 16 --steps 40 --warmup 10 --csv "$d/torch_gpt2_b16.csv" || rc=1
  python3 - "$d" <<'PY'
import json, pathlib, statistics, sys
d = pathlib.Path(sys.argv[1])
for run in sorted((d / "runs").iterdir()):
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"][1:]
    summary = [r for r in recs if r["kind"] == "summary"][-1]
    print(f"{run.name}: median {statistics.median(r['tokens_per_s'] for r in train):.0f} tokens/s "
          f"over {len(train)} windows, peak memory {summary.get('mem_peak_mib', 0):.0f} MiB")
PY
  cat "$d/torch_gpt2_b16.csv" 2>/dev/null
  return $rc
}

# Data-parallel overhead on one GPU: GPT-2 124M alone against the same run as one NCCL rank of
# `trainer --nproc-per-node 1` (the Reducer's bucket copies and all-reduce, the stop vote).
stage_ddp1() {
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  local d=$RES/ddp1 rc=0 n
  mkdir -p "$d/runs"
  for n in 0 1; do
    local launch=()
    (( n > 0 )) && launch=(--nproc-per-node "$n")
    rm -rf "runs/gpu_check/gpt2_nproc$n"
    run "$BUILD_DIR/trainer" --config configs/gpt2-124m.yaml --set run.name="gpt2_nproc$n" \
      --set run.output_dir=runs/gpu_check --set train.max_steps=150 --set train.eval_every=0 \
      --set train.eval_batches=1 --set train.checkpoint_every=0 "${launch[@]}" || rc=1
    keep_run "runs/gpu_check/gpt2_nproc$n" "$d/runs/gpt2_nproc$n"
  done
  python3 - "$d" <<'PY' | tee "$d/ddp1.txt"
import json, pathlib, statistics, sys
d = pathlib.Path(sys.argv[1])
rates = {}
for run in sorted((d / "runs").iterdir()):
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"][1:]
    rates[run.name] = statistics.median(r["tokens_per_s"] for r in train)
    print(f"{run.name}: median {rates[run.name]:.0f} tokens/s over {len(train)} windows, "
          f"median step {statistics.median(r['step_time_ms'] for r in train):.2f} ms, "
          f"host syncs/step {statistics.median(r['host_syncs_per_step'] for r in train):.2f}")
if len(rates) == 2:
    print(f"1 NCCL rank / alone: {rates['gpt2_nproc1'] / rates['gpt2_nproc0']:.3f}")
PY
  return $rc
}

# Data-parallel scaling of GPT-2 124M (bf16, 16 x 1024 tokens per GPU, no accumulation) on 1, 2,
# 4, 8 GPUs up to the machine's count (or SCALING_NPROC, e.g. 1,2): brrr's `trainer
# --nproc-per-node N` against PyTorch DDP under torchrun (eager and torch.compile), the same call.
# NCCL's NVLink multicast stays off (the lent machines need it; the launchers pass it on).
stage_scaling() {
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local d=$RES/scaling rc=0 n gpus counts
  mkdir -p "$d/runs"
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  counts=${SCALING_NPROC:-$(for n in 1 2 4 8; do (( n <= gpus )) && printf '%s,' "$n"; done)}
  for n in ${counts//,/ }; do
    rm -rf "runs/gpu_check/scale_n$n"
    run "$BUILD_DIR/trainer" --nproc-per-node "$n" --config configs/gpt2-124m.yaml \
      --set run.name="scale_n$n" --set run.output_dir=runs/gpu_check --set data.batch_size=16 \
      --set train.grad_accum_steps=1 --set train.max_steps="${SCALING_STEPS:-80}" \
      --set train.eval_every=0 --set train.eval_batches=1 --set train.checkpoint_every=0 || rc=1
    keep_run "runs/gpu_check/scale_n$n" "$d/runs/scale_n$n"
    run python3 -m torch.distributed.run --nproc-per-node "$n" bench/torch_gpt2.py \
      --tokens data_cache/fortunes_train.bin --modes "${SCALING_TORCH_MODES:-eager,compile}" \
      --accum 1 --batch 16 --steps "${SCALING_TORCH_STEPS:-30}" --warmup 10 \
      --csv "$d/torch_n$n.csv" || rc=1
  done
  python3 - "$d" <<'PY' | tee "$d/scaling.csv"
import csv, json, pathlib, statistics, sys
d = pathlib.Path(sys.argv[1])
rows = {}
for run in sorted((d / "runs").iterdir()):
    n = int(run.name.removeprefix("scale_n"))
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"][1:]
    if not train:
        continue
    comm = train[-1].get("comm_ms", {})
    rows.setdefault(n, {})["brrr"] = statistics.median(r["tokens_per_s"] for r in train)
    rows[n]["exposed_comm_ms"] = comm.get("backward_comm", 0) - comm.get("overlap", 0)
for f in sorted(d.glob("torch_n*.csv")):
    n = int(f.stem.removeprefix("torch_n"))
    for r in csv.DictReader(l for l in f.open() if not l.startswith("#")):
        rows.setdefault(n, {})[f"torch_{r['mode']}"] = float(r["tokens_per_s"])
impls = ["brrr", "torch_eager", "torch_compile"]
print("N,impl,tokens_per_s,tokens_per_s_per_gpu,scaling_efficiency,brrr_over_impl")
for n in sorted(rows):
    for impl in impls:
        if impl not in rows[n]:
            continue
        tps = rows[n][impl]
        base = rows.get(1, {}).get(impl)
        eff = f"{tps / (n * base):.3f}" if base else ""
        ratio = f"{rows[n]['brrr'] / tps:.3f}" if "brrr" in rows[n] else ""
        print(f"{n},{impl},{tps:.0f},{tps / n:.0f},{eff},{ratio}")
    if "exposed_comm_ms" in rows[n]:
        print(f"# N={n}: brrr's exposed all-reduce (c10d: comm - overlap) {rows[n]['exposed_comm_ms']:.2f} ms/step")
PY
  python3 bench/plot_scaling.py "$d/scaling.csv" --out "$d/scaling_gpt2.png" \
    --title "GPT-2 124M, bf16, 16 x 1024 tokens per GPU" || rc=1
  return $rc
}

# ResNet-50 bf16 from the JPEG folder (configs/blog/05_large_batch.yaml) on N ranks, each with
# min(16, cores / N) loader workers: images/s, scaling efficiency, and every GPU's utilisation
# sampled by nvidia-smi during the run.
stage_scaling_resnet() {
  need_data || return 1
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local d=$RES/scaling_resnet rc=0 n gpus counts workers smi
  mkdir -p "$d/runs"
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  counts=${SCALING_NPROC:-$(for n in 1 2 4 8; do (( n <= gpus )) && printf '%s,' "$n"; done)}
  for n in ${counts//,/ }; do
    workers=$(( $(nproc) / n ))
    (( workers > 16 )) && workers=16
    (( workers < 1 )) && workers=1
    rm -rf "runs/gpu_check/resnet_n$n"
    nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms 500 \
      > "$d/util_n$n.csv" &
    smi=$!
    run "$BUILD_DIR/trainer" --nproc-per-node "$n" --config configs/blog/05_large_batch.yaml \
      --set run.name="resnet_n$n" --set run.output_dir=runs/gpu_check \
      --set data.num_workers="$workers" --set train.max_steps="${SCALING_RESNET_STEPS:-150}" \
      --set train.eval_every=0 --set train.checkpoint_every=0 || rc=1
    kill "$smi" 2>/dev/null
    keep_run "runs/gpu_check/resnet_n$n" "$d/runs/resnet_n$n"
  done
  python3 - "$d" <<'PY' | tee "$d/scaling.csv"
import json, pathlib, statistics, sys
d = pathlib.Path(sys.argv[1])
rate, util = {}, {}
for run in sorted((d / "runs").iterdir()):
    n = int(run.name.removeprefix("resnet_n"))
    recs = [json.loads(l) for l in (run / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"][1:]
    if train:
        rate[n] = statistics.median(r["samples_per_s"] for r in train)
    samples = {}
    for line in (d / f"util_n{n}.csv").open():
        gpu, pct = (int(v) for v in line.split(","))
        samples.setdefault(gpu, []).append(pct)
    # the middle of the run: start-up and the end left out
    util[n] = {g: statistics.mean(v[len(v) // 5: len(v) - len(v) // 10] or v)
               for g, v in sorted(samples.items()) if g < n}
print("N,impl,tokens_per_s,tokens_per_s_per_gpu,scaling_efficiency,brrr_over_impl")
for n in sorted(rate):
    eff = f"{rate[n] / (n * rate[1]):.3f}" if 1 in rate else ""
    print(f"{n},brrr,{rate[n]:.0f},{rate[n] / n:.0f},{eff},1.000")
    print(f"# N={n}: GPU utilisation % per rank: " +
          ", ".join(f"{g}: {u:.0f}" for g, u in util.get(n, {}).items()))
PY
  python3 bench/plot_scaling.py "$d/scaling.csv" --out "$d/scaling_resnet50.png" --unit images \
    --title "ResNet-50, bf16, from JPEGs (configs/blog/05_large_batch.yaml)" || rc=1
  return $rc
}

# The fault drill on the real machine: GPT-2 on all GPUs (or SCALING_NPROC's largest), SIGKILL of
# the last rank after the first checkpoint; the job must end within 30 s naming that rank and
# leave no trainer process; then the run resumes from its checkpoint on N and on N/2 GPUs.
stage_drill() {
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local d=$RES/drill rc=0 n pid victim t0 secs ckpt half p
  mkdir -p "$d"
  n=$(nvidia-smi -L 2>/dev/null | wc -l)
  [[ -n "${SCALING_NPROC:-}" ]] && n=${SCALING_NPROC##*,}
  local common=(--config configs/gpt2-124m.yaml --set run.output_dir=runs/gpu_check
                --set data.batch_size=16 --set train.grad_accum_steps=1 --set train.eval_every=0
                --set train.eval_batches=1)
  rm -rf runs/gpu_check/drill runs/gpu_check/drill_half
  echo "$(date -u +%FT%TZ) [$STAGE] trainer --nproc-per-node $n ... (killed)" >> "$RES/commands.txt"
  "$BUILD_DIR/trainer" --nproc-per-node "$n" "${common[@]}" --set run.name=drill \
    --set train.max_steps=100000 --set train.checkpoint_every=20 > "$d/drill.out" 2> "$d/drill.err" &
  pid=$!
  for _ in $(seq 600); do
    compgen -G "runs/gpu_check/drill/checkpoints/step_*.pt" > /dev/null && break
    sleep 0.5
  done
  victim=""
  for p in $(pgrep -P "$pid"); do
    tr '\0' '\n' < "/proc/$p/environ" | grep -qx "RANK=$(( n - 1 ))" && victim=$p
  done
  [[ -n "$victim" ]] || { echo "drill: no rank $(( n - 1 )) found"; kill "$pid"; return 1; }
  t0=$SECONDS
  kill -9 "$victim"
  wait "$pid"
  echo "drill: launcher exit $? after $(( SECONDS - t0 )) s" | tee "$d/drill.txt"
  grep "launcher:" "$d/drill.err" | tee -a "$d/drill.txt"
  (( SECONDS - t0 <= 30 )) || { echo "drill: took longer than 30 s" | tee -a "$d/drill.txt"; rc=1; }
  sleep 1
  if pgrep -f "run.name=drill" > /dev/null; then
    echo "drill: processes left behind:" | tee -a "$d/drill.txt"
    pgrep -af "run.name=drill" | tee -a "$d/drill.txt"
    rc=1
  fi
  ckpt=$(ls runs/gpu_check/drill/checkpoints/step_*.pt | tail -1)
  half=$(( n > 1 ? n / 2 : 1 ))
  run "$BUILD_DIR/trainer" --nproc-per-node "$n" "${common[@]}" --set run.name=drill \
    --set train.max_steps=$(( $(basename "$ckpt" .pt | sed 's/step_0*//') + 20 )) \
    --resume auto || rc=1
  run "$BUILD_DIR/trainer" --nproc-per-node "$half" "${common[@]}" --set run.name=drill_half \
    --set data.batch_size=$(( 16 * n / half )) \
    --set train.max_steps=$(( $(basename "$ckpt" .pt | sed 's/step_0*//') + 20 )) \
    --resume "$ckpt" || rc=1
  keep_run runs/gpu_check/drill "$d/runs/drill"
  keep_run runs/gpu_check/drill_half "$d/runs/drill_half"
  return $rc
}

# The trainer suite's GPU tests alone (the CUDA-graph step and everything else of the trainer on
# the device): a quick check after a change to the step.
stage_graphtests() {
  local rc=0
  [[ -f "$BUILD_DIR/golden/optim_trajectories.pt" ]] ||
    run python3 tests/golden/make_all.py --out "$BUILD_DIR/golden" || rc=1
  run "$BUILD_DIR/tests/trainer_tests" --gtest_filter='*Cuda*' --gtest_brief=1 || rc=1
  run "$BUILD_DIR/tests/cli_tests" --gtest_filter="${CLI_FILTER:-*Cuda*}" --gtest_brief=1 || rc=1
  return $rc
}

# train.cuda_graph on GPT-2 124M (issue 13): the fused step at B=16 x 1024, bf16, graphed and
# eager, against PyTorch eager and torch.compile, the same call (tokens/s, peak memory, syncs).
stage_graph_gpt() {
  set -o pipefail
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  local d=$RES/graph_gpt rc=0 g
  mkdir -p "$d/runs"
  for g in auto false; do
    rm -rf "runs/gpu_check/gpt2_b16_graph_$g"
    run "$BUILD_DIR/trainer" --config configs/gpt2-124m.yaml --set run.name="gpt2_b16_graph_$g" \
      --set run.output_dir=runs/gpu_check --set data.batch_size=16 --set train.grad_accum_steps=1 \
      --set train.max_steps=100 --set train.log_every=20 --set train.eval_every=0 \
      --set train.eval_batches=1 --set model.fused=auto --set train.cuda_graph=$g 2>&1 | tail -5 || rc=1
    keep_run "runs/gpu_check/gpt2_b16_graph_$g" "$d/runs/gpt2_b16_graph_$g"
  done
  run python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes eager,compile \
    --accum 1 --batch 16 --steps 40 --warmup 10 --csv "$d/torch_gpt2_b16.csv" || rc=1
  python3 bench/summarize_runs.py "$d/runs" | tee "$d/runs.txt"
  cat "$d/torch_gpt2_b16.csv" 2>/dev/null
  return $rc
}

# Where the eager fused GPT-2 step loses its last percent to torch.compile: Kineto traces of 3
# steps at B=16 of brrr's fused step eager and graphed, and of torch.compile's, summed by kernel
# (all GPU work and the first-to-last span per step, kernel counts).
stage_graphprof() {
  set -o pipefail
  [[ -s data_cache/fortunes_train.bin ]] || run scripts/prepare_data.sh tokens || return 1
  local d=$RES/graphprof rc=0 g name
  mkdir -p "$d/runs"
  for g in false auto; do
    name=gpt2_prof_graph_$g
    rm -rf "runs/gpu_check/$name"
    run "$BUILD_DIR/trainer" --config configs/gpt2-124m.yaml --set run.name="$name" \
      --set run.output_dir=runs/gpu_check --set data.batch_size=16 --set train.grad_accum_steps=1 \
      --set train.max_steps=40 --set train.log_every=20 --set train.eval_every=0 \
      --set train.eval_batches=1 --set model.fused=auto --set train.cuda_graph=$g \
      --set train.profile.start_step=25 --set train.profile.steps=3 2>&1 | tail -3 || rc=1
    cp "runs/gpu_check/$name/trace.json" "$d/brrr_graph_$g.json" 2>/dev/null
    keep_run "runs/gpu_check/$name" "$d/runs/$name"
  done
  run python3 bench/torch_gpt2.py --tokens data_cache/fortunes_train.bin --modes compile \
    --accum 1 --batch 16 --steps 10 --warmup 10 --profile "$d" --profile-steps 3 || rc=1
  run python3 bench/trace_kernels.py --steps 3 compile="$d/compile_accum1.json" \
    eager="$d/brrr_graph_false.json" graphed="$d/brrr_graph_auto.json" --top 45 |
    tee "$d/kernels.md" || rc=1
  gzip -f "$d"/*.json
  return $rc
}

# train.cuda_graph on ResNet-50 (issue 13): bf16, channels-last, trained from the JPEG folder
# (configs/blog/05_large_batch.yaml, 16 workers) at batch 64 and 256, graphed and eager, against
# PyTorch's eager step and its step captured in one CUDA graph with the data already on the GPU.
stage_graph_resnet() {
  set -o pipefail
  need_data || return 1
  local d=$RES/graph_resnet rc=0 b g
  mkdir -p "$d/runs"
  run python3 bench/torch_resnet_step.py --batches 64,256 --steps 30 --warmup 10 \
    --channels-last true --graph --csv "$d/torch_resnet.csv" || rc=1
  for b in 64 256; do
    for g in auto false; do
      rm -rf "runs/gpu_check/r${b}_graph_$g"
      run "$BUILD_DIR/trainer" --config configs/blog/05_large_batch.yaml \
        --set run.name="r${b}_graph_$g" --set run.output_dir=runs/gpu_check \
        --set data.batch_size=$b --set train.cuda_graph=$g \
        --set train.max_steps=$(( b == 64 ? 300 : 120 )) 2>&1 | tail -4 || rc=1
      keep_run "runs/gpu_check/r${b}_graph_$g" "$d/runs/r${b}_graph_$g"
    done
  done
  python3 bench/summarize_runs.py "$d/runs" | tee "$d/runs.txt"
  cat "$d/torch_resnet.csv" 2>/dev/null
  return $rc
}

stage_blog() {
  need_data || return 1
  local rc=0 r
  run env TRAINER="$BUILD_DIR/trainer" RUNS_DIR=runs/blog REPORT_DIR="$RES/blog" \
    LOG_DIR="$LOG/blog" scripts/run_blog.sh || rc=1
  for r in runs/blog/blog_*; do
    [[ -d "$r" ]] && keep_run "$r" "$RES/blog/runs/$(basename "$r")"
  done
  return $rc
}

# Seconds each stage may take at most (a longer one is stopped and reported as timed out).
# With FULL_TESTS the tests stage also runs the whole suite, whose *Cuda* tests hold a CTest resource
# lock (one at a time): 240 s ran out at 337 of 353 tests on 2026-12-01.
if [[ "${FULL_TESTS:-0}" == 1 ]]; then default_tests_budget=420; else default_tests_budget=240; fi
declare -A BUDGET=([build]=${STAGE_BUDGET_BUILD:-480} [tests]=${STAGE_BUDGET_TESTS:-$default_tests_budget}
                   [data]=${STAGE_BUDGET_DATA:-120} [loader]=${STAGE_BUDGET_LOADER:-200}
                   [resnet]=${STAGE_BUDGET_RESNET:-240} [gpt]=${STAGE_BUDGET_GPT:-420}
                   [gptprof]=${STAGE_BUDGET_GPTPROF:-180}
                   [fusedprof]=${STAGE_BUDGET_FUSEDPROF:-200}
                   [recipe]=${STAGE_BUDGET_RECIPE:-360} [autotune]=${STAGE_BUDGET_AUTOTUNE:-240}
                   [resnet64]=${STAGE_BUDGET_RESNET64:-200} [fused]=${STAGE_BUDGET_FUSED:-420}
                   [blog]=${STAGE_BUDGET_BLOG:-420} [ddp1]=${STAGE_BUDGET_DDP1:-240}
                   [scaling]=${STAGE_BUDGET_SCALING:-540}
                   [scaling_resnet]=${STAGE_BUDGET_SCALING_RESNET:-420}
                   [drill]=${STAGE_BUDGET_DRILL:-300} [graphtests]=${STAGE_BUDGET_GRAPHTESTS:-240}
                   [graph_gpt]=${STAGE_BUDGET_GRAPH_GPT:-240}
                   [graph_resnet]=${STAGE_BUDGET_GRAPH_RESNET:-300}
                   [blog_graph]=${STAGE_BUDGET_BLOG_GRAPH:-200}
                   [graphprof]=${STAGE_BUDGET_GRAPHPROF:-240})
stages=("$@")
(( ${#stages[@]} > 0 )) || stages=(build tests data loader resnet gpt blog)
for s in "${stages[@]}"; do
  [[ -n "${BUDGET[$s]:-}" ]] || { echo "gpu_check: unknown stage '$s' (build tests data loader resnet gpt gptprof fusedprof recipe autotune resnet64 fused blog ddp1 scaling scaling_resnet drill graphtests graph_gpt graph_resnet blog_graph graphprof)" >&2; exit 2; }
done

export -f run keep_run need_data profile_gpt stage_build stage_tests stage_data stage_loader stage_resnet \
  stage_gpt stage_gptprof stage_fusedprof stage_recipe stage_autotune stage_resnet64 stage_fused stage_blog stage_ddp1 stage_scaling stage_scaling_resnet stage_drill \
  stage_graphtests stage_graph_gpt stage_graph_resnet stage_blog_graph stage_graphprof
export RES LOG ROOT
status=0
for STAGE in "${stages[@]}"; do
  export STAGE
  left=$(( BUDGET_S - (SECONDS - T0) - 15 ))  # 15 s kept for packing the results
  limit=${BUDGET[$STAGE]}
  (( limit > left )) && limit=$left
  if (( limit < 20 )); then
    echo "$STAGE skipped (no time left: ${left}s)" | tee -a "$RES/stages.txt"
    status=1
    continue
  fi
  echo "==== $(date -u +%T) stage $STAGE (limit ${limit}s) ===="
  start=$SECONDS
  timeout -k 10 "$limit" bash -c "stage_$STAGE" > "$LOG/$STAGE.log" 2>&1
  rc=$?
  secs=$(( SECONDS - start ))
  note=""
  (( rc == 124 || rc == 137 )) && note=" TIMED OUT"
  echo "$STAGE rc=$rc ${secs}s$note" | tee -a "$RES/stages.txt"
  (( rc != 0 )) && { status=1; tail -15 "$LOG/$STAGE.log"; }
  [[ "$STAGE" == build && $rc != 0 ]] && { echo "build failed: later stages may fail too"; }
done
exit $status
