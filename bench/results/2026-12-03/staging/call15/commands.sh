#!/usr/bin/env bash
# Call 15 (b1a81ba + working tree): column_sum in one launch without clusters: (slabs, groups) ordinary blocks, the last
# block of a slab adds the slab's partials in group order (BRRR_COLSUM_GROUPS, experiment only; 0 = the cluster kernel).
# Tests + sanitizers at 11 groups; bench at 0, 8, 11, 22, 33 groups, twice; ncu at 0, 8, 11, 22.
set -u
T0=$SECONDS
L=/tmp/logs; rm -rf $L; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo "b1a81ba + working tree (clusterless one-launch column_sum)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
git diff -- core/ops/linear_bias.cu > $L/kernel.patch 2>/dev/null
cp scratch/call15.sh $L/commands.sh
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
for g in 11 8 22; do
  BRRR_COLSUM_GROUPS=$g timeout 120 $B/tests/ops_tests --gtest_filter='LinearBias*' > $L/tests_g$g.log 2>&1; echo "tests groups $g rc=$? $((SECONDS-T0)) s"; grep -E "FAILED|Failure" $L/tests_g$g.log | head -10
done
n=0
for g in 0 8 11 22 33 0 8 11 22 33; do
  n=$((n+1))
  BRRR_COLSUM_GROUPS=$g timeout 60 $B/bench/bench_ops_bench --repeats 30 --only bias_grad --csv $L/ops_${n}_g$g.csv > $L/bench_$n.log 2>&1; echo "bench $n groups $g rc=$? $((SECONDS-T0)) s"
  grep -E "bias_grad_(768|2304),(brrr_graph_per|copy_half)" $L/ops_${n}_g$g.csv | tr '\n' ' '; echo
done
M=gpu__time_duration.sum,launch__grid_size,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,dram__throughput.avg.pct_of_peak_sustained_elapsed
for g in 0 8 11 22; do
BRRR_COLSUM_GROUPS=$g timeout 100 ncu --clock-control none -k 'regex:column_sum_(cluster|last_block)' -c 40 --metrics $M --csv $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu_g$g.csv 2> $L/ncu_g$g.err; echo "ncu groups $g rc=$? $((SECONDS-T0)) s"
python3 - $L/ncu_g$g.csv <<'PY'
import csv, collections, sys, statistics as st
rows=[r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
by=collections.defaultdict(dict)
for r in rows: by[r['ID']][r['Metric Name']]=float(r['Metric Value'].replace(',',''))
ms=[m for m in by.values() if m.get('launch__grid_size',0) < 1000]
for k in ['gpu__time_duration.sum','launch__grid_size','sm__cycles_active.min','sm__cycles_active.avg','sm__cycles_active.max','sm__cycles_elapsed.avg','dram__throughput.avg.pct_of_peak_sustained_elapsed']:
    v=[m[k] for m in ms if k in m]
    if v: print(f"  {k}: median {st.median(v):.1f} min {min(v):.1f} max {max(v):.1f} (n={len(v)})")
PY
done
for tool in memcheck racecheck synccheck; do
  BRRR_COLSUM_GROUPS=11 timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $B/tests/ops_tests --gtest_filter='LinearBiasCudaTest.OneLaunch*' > $L/san_$tool.log 2>&1; echo "$tool rc=$? $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/san_$tool.log | head -2
done
echo "done $((SECONDS-T0)) s"
