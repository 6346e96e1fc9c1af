#!/usr/bin/env bash
# Call 16 (b1a81ba + working tree): the clusterless one-launch column_sum with a warp's lanes over 4, 8, 16 or 32 slab
# columns (64 to 512 bytes of a row; BRRR_COLSUM_COL_LANES) and 132/192/264 blocks (BRRR_COLSUM_GROUPS); experiment only.
# Tests at two shapes; bench sweep twice; ncu on the cluster kernel, three variants and the two-launch path's partials kernel.
set -u
T0=$SECONDS
L=/tmp/logs; rm -rf $L; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo "b1a81ba + working tree (clusterless one-launch column_sum, lanes x groups)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
git diff -- core/ops/linear_bias.cu > $L/kernel.patch 2>/dev/null
cp scratch/call16.sh $L/commands.sh
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
for lg in 32:64 8:16 16:44; do
  BRRR_COLSUM_COL_LANES=${lg%:*} BRRR_COLSUM_GROUPS=${lg#*:} timeout 120 $B/tests/ops_tests --gtest_filter='LinearBias*' > $L/tests_$lg.log 2>&1; echo "tests $lg rc=$? $((SECONDS-T0)) s"; grep -E "FAILED|Failure" $L/tests_$lg.log | head -10
done
n=0
for rep in 1 2; do
for lg in 4:0 4:8 8:11 8:16 8:22 16:22 16:32 16:44 32:44 32:64 32:88; do
  n=$((n+1))
  BRRR_COLSUM_COL_LANES=${lg%:*} BRRR_COLSUM_GROUPS=${lg#*:} timeout 60 $B/bench/bench_ops_bench --repeats 30 --only bias_grad --csv $L/ops_${n}_$lg.csv > $L/bench_$n.log 2>&1
  echo "$n $lg $(grep -E 'bias_grad_768,(brrr_graph_per|copy_half)' $L/ops_${n}_$lg.csv | cut -d, -f2,4 | tr '\n' ' ')"
done
done
M=gpu__time_duration.sum,launch__grid_size,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
for lg in 4:0 8:16 16:32 32:64 partials; do
  if [[ $lg == partials ]]; then k='regex:column_partials'; lanes=4; g=0; else k='regex:column_sum_(cluster|last_block)'; lanes=${lg%:*}; g=${lg#*:}; fi
  BRRR_COLSUM_COL_LANES=$lanes BRRR_COLSUM_GROUPS=$g timeout 100 ncu --clock-control none -k "$k" -c 40 --metrics $M --csv $B/bench/bench_ops_bench --repeats 1 --only bias_grad > $L/ncu_$lg.csv 2> $L/ncu_$lg.err; echo "ncu $lg rc=$? $((SECONDS-T0)) s"
python3 - $L/ncu_$lg.csv <<'PY'
import csv, collections, sys, statistics as st
rows=[r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
by=collections.defaultdict(dict)
for r in rows: by[r['ID']][r['Metric Name']]=float(r['Metric Value'].replace(',',''))
ms=[m for m in by.values() if 2.4e7 < m.get('dram__bytes_read.sum',0) < 2.7e7]
for k in ['gpu__time_duration.sum','launch__grid_size','sm__cycles_active.min','sm__cycles_active.avg','sm__cycles_active.max','sm__cycles_elapsed.avg','dram__throughput.avg.pct_of_peak_sustained_elapsed','dram__bytes_read.sum']:
    v=[m[k] for m in ms if k in m]
    if v: print(f"  {k}: median {st.median(v):.1f} min {min(v):.1f} max {max(v):.1f} (n={len(v)})")
PY
done
BRRR_COLSUM_COL_LANES=32 BRRR_COLSUM_GROUPS=64 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/ops_tests --gtest_filter='LinearBiasCudaTest.OneLaunch*' > $L/san_memcheck.log 2>&1; echo "memcheck rc=$? $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY" $L/san_memcheck.log | head -2
echo "done $((SECONDS-T0)) s"
