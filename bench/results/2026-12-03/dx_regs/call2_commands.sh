#!/usr/bin/env bash
# Call 2: tree B (x_bias sums in registers + sum_partials unroll 8 and shuffle tree) built, GPU
# tests + sanitizer; bench B (also column_partials unroll 8); variant C (B + programmatic dependent launch of sum_partials) with
# its tests; variant A (B with HEAD's kernel_utils.cuh and linear_bias.cu: the old column-sum
# code). Logs in logs.tgz.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build_B.log 2>&1 || { tail -30 $L/build_B.log; exit 1; }
echo "build B $((SECONDS-T0)) s"
$B/tests/ops_tests --gtest_filter='*Cuda*' > $L/tests_B.log 2>&1; echo "tests B rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $L/tests_B.log | head
compute-sanitizer --tool memcheck $B/tests/ops_tests --gtest_filter='ResidualLayerNormCuda*:LinearBiasCuda*:BiasGeluCuda*' > $L/sanitizer_B.log 2>&1; echo "sanitizer B rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $L/sanitizer_B.log | head -5
ONLY=ceilings,residual_layernorm,residual_bias,bias_gelu,bias_grad
$B/bench/bench_ops_bench --repeats 30 --only $ONLY --csv $L/ops_B.csv > $L/bench_B.log 2>&1; echo "bench B rc=$? $((SECONDS-T0)) s"
cp core/ops/kernel_utils.cuh core/ops/linear_bias.cu core/ops/residual_layernorm.cu core/ops/bias_gelu.cu /tmp/
patch -p0 < scratch/pdl.patch > /dev/null && echo "variant C patched"
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build_C.log 2>&1 || { tail -30 $L/build_C.log; }
echo "build C $((SECONDS-T0)) s"
for f in $B/bench/bench_ops_bench $(find $B -maxdepth 2 -name 'libbrrr_ops*'); do /usr/local/cuda/bin/cuobjdump -sass $f 2>/dev/null; done | grep -oE "ACQBULK|PREEXIT|griddepcontrol[a-z_.]*" | sort | uniq -c > $L/sass_C.txt
$B/tests/ops_tests --gtest_filter='ResidualLayerNormCuda*:LinearBiasCuda*:BiasGeluCuda*' > $L/tests_C.log 2>&1; echo "tests C rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $L/tests_C.log | head
$B/bench/bench_ops_bench --repeats 30 --only $ONLY --csv $L/ops_C.csv > $L/bench_C.log 2>&1; echo "bench C rc=$? $((SECONDS-T0)) s"
cp /tmp/kernel_utils.cuh /tmp/linear_bias.cu /tmp/residual_layernorm.cu /tmp/bias_gelu.cu core/ops/
if (( SECONDS - T0 < 420 )); then
  cp scratch/A/kernel_utils.cuh scratch/A/linear_bias.cu core/ops/
  ninja -C $B -j16 bench_ops_bench > $L/build_A.log 2>&1 || tail -30 $L/build_A.log
  echo "build A $((SECONDS-T0)) s"
  $B/bench/bench_ops_bench --repeats 30 --only $ONLY --csv $L/ops_A.csv > $L/bench_A.log 2>&1; echo "bench A rc=$? $((SECONDS-T0)) s"
  cp /tmp/kernel_utils.cuh /tmp/linear_bias.cu core/ops/
fi
python3 - <<'PY'
import csv, os
L='/tmp/logs'
tabs={}
for v in 'ABC':
    p=f'{L}/ops_{v}.csv'
    if os.path.exists(p):
        tabs[v]={(r['op'],r['impl'],r['pass']):float(r['ms']) for r in csv.DictReader(open(p))}
keys=[k for k in tabs.get('B',{}) if 'graph' in k[1] or k[1]=='ceiling']
print('op,impl,pass,' + ','.join(tabs))
for k in keys:
    print(','.join(k) + ',' + ','.join(f"{tabs[v].get(k,float('nan')):.4f}" for v in tabs))
PY
