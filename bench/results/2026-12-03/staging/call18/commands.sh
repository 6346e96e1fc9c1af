#!/usr/bin/env bash
# Call 18 (b1a81ba + working tree): the clusterless column_sum with chunks of rows handed out as blocks ask (BRRR_COLSUM_CONTIG=2,
# a counter a slab), BRRR_COLSUM_COL_LANES x BRRR_COLSUM_GROUPS; experiment only.
set -u
T0=$SECONDS
L=/tmp/logs; rm -rf $L; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo "b1a81ba + working tree (chunks handed out as blocks ask)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
git diff -- core/ops/linear_bias.cu > $L/kernel.patch 2>/dev/null
cp scratch/call18.sh $L/commands.sh
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
for c in 2:0:16:32 2:0:32:64 2:0:4:8; do
  IFS=: read -r contig _ lanes g <<< "$c"
  BRRR_COLSUM_CONTIG=$contig BRRR_COLSUM_COL_LANES=$lanes BRRR_COLSUM_GROUPS=$g timeout 120 $B/tests/ops_tests --gtest_filter='LinearBias*' > $L/tests_$c.log 2>&1; echo "tests contig:_:lanes:groups $c rc=$? $((SECONDS-T0)) s"; grep -E "FAILED|Failure" $L/tests_$c.log | head -10
done
n=0
for rep in 1 2; do
for c in 0:4:0 2:4:8 2:8:11 2:8:16 2:16:22 2:16:32 2:16:44 2:32:44 2:32:64 2:32:88; do
  n=$((n+1)); IFS=: read -r contig lanes g <<< "$c"
  BRRR_COLSUM_CONTIG=$contig BRRR_COLSUM_COL_LANES=$lanes BRRR_COLSUM_GROUPS=$g timeout 60 $B/bench/bench_ops_bench --repeats 30 --only bias_grad --csv $L/ops_${n}_$c.csv > $L/bench_$n.log 2>&1
  echo "$n contig:lanes:groups $c $(grep -E 'bias_grad_768,(brrr_graph_per|copy_half)' $L/ops_${n}_$c.csv | cut -d, -f2,4 | tr '\n' ' ')"
done
done
M=gpu__time_duration.sum,launch__grid_size,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
for c in 2:16:32 2:32:44 2:8:16; do
  IFS=: read -r contig lanes g <<< "$c"
  BRRR_COLSUM_CONTIG=$contig BRRR_COLSUM_COL_LANES=$lanes BRRR_COLSUM_GROUPS=$g timeout 100 ncu --clock-control none -k 'regex:column_sum_(cluster|last_block)' -c 40 --metrics $M --csv $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu_$c.csv 2> $L/ncu_$c.err; echo "ncu $c rc=$? $((SECONDS-T0)) s"
python3 - $L/ncu_$c.csv <<'PY'
import csv, collections, sys, statistics as st
rows=[r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
by=collections.defaultdict(dict)
for r in rows: by[r['ID']][r['Metric Name']]=float(r['Metric Value'].replace(',',''))
ms=[m for m in by.values() if 2.4e7 < m.get('dram__bytes_read.sum',0) < 2.7e7]
for k in ['gpu__time_duration.sum','launch__grid_size','sm__cycles_active.min','sm__cycles_active.avg','sm__cycles_active.max','sm__cycles_elapsed.avg','dram__throughput.avg.pct_of_peak_sustained_elapsed']:
    v=[m[k] for m in ms if k in m]
    if v: print(f"  {k}: median {st.median(v):.1f} min {min(v):.1f} max {max(v):.1f} (n={len(v)})")
PY
done
for tool in memcheck racecheck; do
  BRRR_COLSUM_CONTIG=2 BRRR_COLSUM_COL_LANES=16 BRRR_COLSUM_GROUPS=32 timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $B/tests/ops_tests --gtest_filter='LinearBiasCudaTest.OneLaunch*' > $L/san_$tool.log 2>&1; echo "$tool rc=$? $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/san_$tool.log | head -2
done
echo "done $((SECONDS-T0)) s"
