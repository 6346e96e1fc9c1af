#!/usr/bin/env bash
# The cost of data-parallel gradient synchronisation on CPU: 2 Gloo ranks with c10d's Reducer
# (`trainer --nproc-per-node 2`) against the same 2 processes training side by side without any
# synchronisation (two independent runs started together, one core each). Same model, same
# per-process batch, same threads; the difference is the all-reduce and what of it backward
# does not hide.
#
#   bench/dist_overhead.sh [TRAINER] [WORK_DIR]      (defaults: build-cpu/trainer, /tmp/brrr_dist_bench)
#
# Prints the median step time and backward time of each setup (train records after the first
# window), the ratio, and c10d's own split of backward (compute, all-reduce, their overlap).
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINER=$(realpath "${1:-build-cpu/trainer}")
WORK=${2:-/tmp/brrr_dist_bench}
STEPS=${STEPS:-300}
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"

python3 - <<'EOF'
import random
random.seed(0)
with open("train.csv", "w") as f:
    f.write(",".join(f"x{i}" for i in range(64)) + ",label\n")
    for n in range(4096):
        label = n % 10
        f.write(",".join(f"{random.gauss(label / 10, 1):.4f}" for _ in range(64)) + f",{label}\n")
EOF
cat > exp.yaml <<EOF
run: {name: bench, output_dir: runs, seed: 1, device: cpu, num_threads: 1}
model: {name: mlp, in_channels: 64, image_size: 1, num_classes: 10, hidden_sizes: [1024, 1024, 1024]}
data: {dataset: csv, path: train.csv, batch_size: 64, num_workers: 0}
optim: {name: adamw, lr: 0.001}
train: {max_steps: $STEPS, log_every: 20, checkpoint_every: 0}
EOF

export OMP_NUM_THREADS=1
"$TRAINER" --config exp.yaml --set run.name=alone_a > /dev/null 2>&1 &
a=$!
"$TRAINER" --config exp.yaml --set run.name=alone_b > /dev/null 2>&1 &
b=$!
wait $a $b
"$TRAINER" --config exp.yaml --set run.name=reducer --nproc-per-node 2 > /dev/null 2>&1

python3 - <<'EOF'
import json, statistics
def medians(run):
    rows = [json.loads(l) for l in open(f"runs/{run}/metrics.jsonl")]
    train = [r for r in rows if r.get("kind") == "train"][1:]
    return (statistics.median(r["step_time_ms"] for r in train),
            statistics.median(r["breakdown_ms"]["backward"] for r in train))
alone = [medians("alone_a"), medians("alone_b")]
step0 = statistics.mean(s for s, _ in alone)
back0 = statistics.mean(b for _, b in alone)
step1, back1 = medians("reducer")
print(f"{'setup':<34}{'step ms':>10}{'backward ms':>14}")
print(f"{'2 processes, no synchronisation':<34}{step0:>10.2f}{back0:>14.2f}")
print(f"{'2 Gloo ranks, c10d Reducer':<34}{step1:>10.2f}{back1:>14.2f}")
print(f"step time ratio (Reducer / none): {step1 / step0:.3f}")
last = [json.loads(l) for l in open("runs/reducer/metrics.jsonl") if '"train"' in l][-1]
c = last["comm_ms"]
print(f"c10d's timings of backward (running means): compute {c['backward_compute']:.2f} ms, "
      f"all-reduce {c['backward_comm']:.2f} ms, of which overlapped with compute {c['overlap']:.2f} ms")
EOF
