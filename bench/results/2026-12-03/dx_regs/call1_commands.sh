#!/usr/bin/env bash
# Call 1 (2026-12-03, second session): build ops_tests + bench_ops_bench for the H200; GPU tests of
# residual_layernorm (sanitizer too); bench residual_bias / bias_grad twice (per-call graph rows,
# x_bias sums registers vs shared A/B); ncu on the backward and column-sum kernels.
set -u
T0=$SECONDS
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $OUT/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $OUT/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build done $((SECONDS-T0)) s"
$B/tests/ops_tests --gtest_filter='ResidualLayerNorm*:LinearBias*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED " $OUT/tests.log | head
compute-sanitizer --tool memcheck $B/tests/ops_tests --gtest_filter='ResidualLayerNormCuda*' > $OUT/sanitizer.log 2>&1; echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/sanitizer.log | head -5
echo "tests done $((SECONDS-T0)) s"
for rep in 1 2; do
  $B/bench/bench_ops_bench --repeats 30 --only ceilings,residual_bias,bias_grad --csv $OUT/ops_$rep.csv > $OUT/bench_$rep.log 2>&1
  echo "bench $rep rc=$? $((SECONDS-T0)) s"
done
ncu --clock-control none --kernel-name regex:'ln_backward|column_partials|sum_partials' --launch-count 400 \
  --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__grid_size \
  --csv $B/bench/bench_ops_bench --repeats 3 --only residual_bias,bias_grad > $OUT/ncu.csv 2> $OUT/ncu.err
echo "ncu rc=$? $((SECONDS-T0)) s"
python3 - <<'PY'
import csv, os, collections
out = os.environ['OUT']
for rep in (1, 2):
    rows = list(csv.reader(open(f'{out}/ops_{rep}.csv')))[1:]
    print(f'--- bench {rep}')
    for r in rows: print(','.join(r))
try:
    lines = open(f'{out}/ncu.csv').read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    rd = csv.DictReader(lines[start:])
    agg = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rd:
        name = r['Kernel Name'][:90]
        try: agg[name][r['Metric Name']].append(float(r['Metric Value'].replace(',', '')))
        except ValueError: pass
    print('--- ncu (median per kernel)')
    for name, m in agg.items():
        med = {k: sorted(v)[len(v)//2] for k, v in m.items()}
        print(name, len(m.get('gpu__time_duration.sum', [])), {k.split('__')[1][:28]: v for k, v in med.items()})
except Exception as e:
    print('ncu parse failed', e)
PY
