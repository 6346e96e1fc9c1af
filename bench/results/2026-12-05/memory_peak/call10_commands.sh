#!/usr/bin/env bash
# torch.compile alone at the recipe (8 x 1024, accumulation 4) on random tokens: its peak with
# allocations traced, and a plain profile's GPU busy time against its step.
set -uo pipefail
export PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee $R/smi.txt
python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, size=4_000_000, dtype=np.uint16).tofile('/tmp/tok.bin')"
TB="python3 bench/torch_gpt2.py --tokens /tmp/tok.bin --modes compile --accum 4 --batch 8"
$TB --steps 3 --warmup 5 --profile $R/mem --profile-steps 1 --profile-memory > $R/mem.log 2>&1; grep "peak\|tokens/s" $R/mem.log
python3 scripts/memory_peak.py $R/mem/compile_accum4.json --top 12 | tee $R/peak.txt | head -8
gzip -c $R/mem/compile_accum4.json > $OUT/compile_mem.json.gz
$TB --steps 20 --warmup 10 --profile $R/plain --profile-steps 3 > $R/plain.log 2>&1; grep "peak\|tokens/s" $R/plain.log
python3 - $R/plain/compile_accum4.json <<'PY' | tee $R/idle.txt
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
k = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
busy, end = 0.0, None
for s, t in k:
    if end is None or s >= end: busy += t - s; end = t
    elif t > end: busy += t - end; end = t
span = k[-1][1] - k[0][0]
print(f"GPU span {span/3e3:.2f} ms/step, kernels busy {busy/3e3:.2f} ms/step ({100*busy/span:.1f} %), {len(k)/3:.0f} kernels/step")
PY
gzip -c $R/plain/compile_accum4.json > $OUT/compile_plain.json.gz
cp $R/*.txt $R/*.log $OUT/ 2>/dev/null; ls $OUT
