#!/usr/bin/env bash
# Call 3 (04:14Z, as run on the warm machine after call 2): ResNet-50 without train.deterministic,
# two 30-step runs at batch 64, compared as call 2 compared the deterministic pair.
B=build-gpu; mkdir -p $OUT; for k in 1 2; do rm -rf runs/rc/rn_default_$k; $B/trainer --config configs/blog/05_large_batch.yaml --set run.name=rn_default_$k --set run.output_dir=runs/rc --set data.batch_size=64 --set train.max_steps=30 --set train.log_every=1 --set train.eval_every=0 --set train.deterministic=false > $OUT/rn_default_$k.log 2>&1; echo rc=$?; mkdir -p $OUT/rn_default_$k; cp runs/rc/rn_default_$k/metrics.jsonl runs/rc/rn_default_$k/config.yaml $OUT/rn_default_$k/; done; python3 - $OUT <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
r1, r2 = ([json.loads(l) for l in (d / f"rn_default_{k}" / "metrics.jsonl").open() if '"train"' in l] for k in (1, 2))
diff = [x["step"] for x, y in zip(r1, r2) if (x["loss"], x["grad_norm"]) != (y["loss"], y["grad_norm"])]
print(f"resnet default: {len(r1)}/{len(r2)} steps logged, {len(diff)} differ (first {diff[:1]}); last loss {r1[-1]['loss']!r} vs {r2[-1]['loss']!r}")
PY
grep -h "cudnn\|benchmark" $OUT/rn_default_1.log | head -3
