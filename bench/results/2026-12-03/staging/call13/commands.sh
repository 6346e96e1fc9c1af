#!/usr/bin/env bash
# Call 13 (532c363 + staging/call12/variant.patch): ncu per cluster size of column_sum_cluster_kernel at (16384, 768) bf16:
# how even the SMs' active cycles are (min/avg/max) and the kernel's duration, to test update (6)'s reading.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
git apply bench/results/2026-12-03/staging/call12/variant.patch || exit 1
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo "532c363 + call12/variant.patch"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
M=gpu__time_duration.sum,launch__grid_size,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_cluster_gpu_pct,launch__cluster_max_active
timeout 300 ncu --clock-control none -k 'regex:column_sum_cluster' -c 400 --metrics $M --csv $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu.csv 2> $L/ncu.err; echo "ncu rc=$? $((SECONDS-T0)) s"
python3 - <<'PY'
import csv, collections
rows=[r for r in csv.DictReader(l for l in open('/tmp/logs/ncu.csv') if l.startswith('"'))]
by=collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    by[r['ID']][r['Metric Name']]=r['Metric Value']
agg=collections.defaultdict(list)
for i,m in by.items():
    agg[m.get('launch__grid_size')].append(m)
for g,ms in sorted(agg.items(), key=lambda x: int(x[0].replace(',',''))):
    def col(k): return [float(m[k].replace(',','')) for m in ms if k in m]
    import statistics as st
    out=[f"grid {g} n={len(ms)}"]
    for k in ['gpu__time_duration.sum','sm__cycles_active.min','sm__cycles_active.avg','sm__cycles_active.max','sm__cycles_elapsed.avg','dram__throughput.avg.pct_of_peak_sustained_elapsed','sm__warps_active.avg.pct_of_peak_sustained_active','launch__cluster_max_active']:
        v=col(k)
        if v: out.append(f"{k.split('.')[0].replace('__','.')}{'.'+k.split('.')[1] if '.' in k else ''}={st.median(v):.1f}")
    print(' '.join(out))
PY
echo "done $((SECONDS-T0)) s"
