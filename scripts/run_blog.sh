#!/usr/bin/env bash
# Runs the blog ladder (configs/blog/*.yaml, in story order) with the trainer, then writes
#   $REPORT_DIR/blog_table.md / .csv   run, samples/s, tokens/s, step time, data wait %, GPU util, peak memory
#   $REPORT_DIR/plots/*_gpu.png         GPU-utilisation timeline per run (GPU runs only)
#   $REPORT_DIR/plots/gpu_timelines.png all runs stacked: the baseline's sawtooth vs the tuned flat line
#
#   scripts/run_blog.sh                 every rung (ResNet-50 ladder, then the GPT ladder)
#   scripts/run_blog.sh resnet | gpt    one ladder
#   scripts/run_blog.sh 01_baseline 04_bf16 ...   chosen rungs (file names without .yaml)
#
# Environment: TRAINER (default build/trainer), RUNS_DIR (default runs/blog), REPORT_DIR (default
# $RUNS_DIR/report), LOG_DIR (per-run trainer logs; default $REPORT_DIR/logs), BLOG_SET (extra
# space-separated key=value overrides for every run, e.g. "train.max_steps=5" for a smoke run).
# The data must exist (scripts/prepare_data.sh photos tokens). A failing rung is reported and the
# ladder goes on; the exit status is 1 when any rung failed.
set -uo pipefail

cd "$(dirname "$0")/.."
TRAINER=${TRAINER:-build/trainer}
RUNS_DIR=${RUNS_DIR:-runs/blog}
REPORT_DIR=${REPORT_DIR:-$RUNS_DIR/report}
LOG_DIR=${LOG_DIR:-$REPORT_DIR/logs}
BLOG_SET=${BLOG_SET:-}

RESNET=(01_baseline 02_workers 03_pinned 04_bf16 05_large_batch 05b_accum 06_cuda_graph 07_fused)
GPT=(gpt_01_baseline gpt_02_workers_pinned gpt_03_bf16 gpt_04_accum gpt_05_fused gpt_06_cuda_graph)

[[ -x "$TRAINER" ]] || { echo "run_blog: $TRAINER not found (set TRAINER=...)" >&2; exit 2; }
rungs=()
if (( $# == 0 )); then
  rungs=("${RESNET[@]}" "${GPT[@]}")
else
  for a in "$@"; do
    case "$a" in
      resnet) rungs+=("${RESNET[@]}") ;;
      gpt) rungs+=("${GPT[@]}") ;;
      *) [[ -f "configs/blog/$a.yaml" ]] || { echo "run_blog: no configs/blog/$a.yaml" >&2; exit 2; }
         rungs+=("$a") ;;
    esac
  done
fi

mkdir -p "$RUNS_DIR" "$REPORT_DIR/plots" "$LOG_DIR"
sets=()
for kv in $BLOG_SET; do sets+=(--set "$kv"); done
run_dirs=()
failed=0
for rung in "${rungs[@]}"; do
  name="blog_$rung"
  rm -rf "${RUNS_DIR:?}/$name"  # a fresh run, not a resume of an older one
  cmd=("$TRAINER" --config "configs/blog/$rung.yaml" --set "run.name=$name"
       --set "run.output_dir=$RUNS_DIR" "${sets[@]}")
  echo "run_blog: $(date -u +%FT%TZ) ${cmd[*]}"
  start=$SECONDS
  if "${cmd[@]}" > "$LOG_DIR/$name.log" 2>&1; then
    echo "run_blog: $name done in $(( SECONDS - start )) s"
  else
    rc=$?
    failed=1
    echo "run_blog: $name FAILED (exit $rc) after $(( SECONDS - start )) s; last lines of $LOG_DIR/$name.log:" >&2
    tail -5 "$LOG_DIR/$name.log" >&2
  fi
  run_dirs+=("$RUNS_DIR/$name")
done

python3 bench/blog_table.py "${run_dirs[@]}" --out "$REPORT_DIR/blog_table.md" \
  --csv "$REPORT_DIR/blog_table.csv" || failed=1
python3 bench/plot_gpu_timeline.py "${run_dirs[@]}" --out-dir "$REPORT_DIR/plots" || true
exit $failed
