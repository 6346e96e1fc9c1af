#!/usr/bin/env bash
# Call 14 (532c363 + working tree): column_sum's cluster kernel capped at N blocks a SM by unused dynamic shared memory
# (BRRR_COLSUM_MAX_BLOCKS_PER_SM, experiment only; 0 = no cap as on main). Tests + sanitizers at 2; bench at 0, 2, 3, 0; ncu at 2.
set -u
T0=$SECONDS
L=/tmp/logs; rm -rf $L; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo "532c363 + working tree (blocks a SM capped)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
git diff > $L/kernel.patch 2>/dev/null
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
export BRRR_COLSUM_MAX_BLOCKS_PER_SM=2
timeout 120 $B/tests/ops_tests --gtest_filter='LinearBias*' > $L/tests.log 2>&1; echo "tests rc=$? $((SECONDS-T0)) s"; grep -E "FAILED|Failure" $L/tests.log | head -10
n=0
for cap in 0 2 3 0 2; do
  n=$((n+1))
  BRRR_COLSUM_MAX_BLOCKS_PER_SM=$cap timeout 60 $B/bench/bench_ops_bench --repeats 30 --only bias_grad --csv $L/ops_${n}_cap$cap.csv > $L/bench_$n.log 2>&1; echo "bench $n cap $cap rc=$? $((SECONDS-T0)) s"
  grep -E "bias_grad_(768|1536),(brrr_graph_per|copy_half|brrr_two_launches_graph_per)" $L/ops_${n}_cap$cap.csv | tr '\n' ' '; echo
done
M=gpu__time_duration.sum,launch__grid_size,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__cluster_max_active
for cap in 2 0; do
BRRR_COLSUM_MAX_BLOCKS_PER_SM=$cap timeout 100 ncu --clock-control none -k 'regex:column_sum_cluster' -c 40 --metrics $M --csv $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu_cap$cap.csv 2> $L/ncu_cap$cap.err; echo "ncu cap $cap rc=$? $((SECONDS-T0)) s"
python3 - $L/ncu_cap$cap.csv <<'PY'
import csv, collections, sys, statistics as st
rows=[r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
by=collections.defaultdict(dict)
for r in rows: by[r['ID']][r['Metric Name']]=float(r['Metric Value'].replace(',',''))
ms=list(by.values())
for k in ['gpu__time_duration.sum','launch__grid_size','sm__cycles_active.min','sm__cycles_active.avg','sm__cycles_active.max','sm__cycles_elapsed.avg','dram__throughput.avg.pct_of_peak_sustained_elapsed','launch__cluster_max_active']:
    v=[m[k] for m in ms if k in m]
    if v: print(f"  {k}: median {st.median(v):.1f} min {min(v):.1f} max {max(v):.1f} (n={len(v)})")
PY
done
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $B/tests/ops_tests --gtest_filter='LinearBiasCudaTest.OneLaunch*' > $L/san_$tool.log 2>&1; echo "$tool rc=$? $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/san_$tool.log | head -2
done
echo "done $((SECONDS-T0)) s"
