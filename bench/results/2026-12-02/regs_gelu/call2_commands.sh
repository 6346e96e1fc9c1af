#!/bin/bash
set -u
T0=$SECONDS
P=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
{ date -u +%FT%TZ; echo "commit ${BRRR_COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $OUT/meta.txt
TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$P -DCMAKE_CUDA_ARCHITECTURES=90-real > $OUT/cmake.log 2>&1 || { tail -30 $OUT/cmake.log; exit 1; }
ninja -C build-gpu -j16 ops_tests bench_ops_bench > $OUT/build.log 2>&1 || { grep -B2 -A20 "error" $OUT/build.log | head -80; exit 1; }
echo "build done $((SECONDS-T0)) s"
build-gpu/tests/ops_tests --gtest_filter='*Cuda*' --gtest_brief=1 > $OUT/ops_tests.log 2>&1; echo "ops cuda tests rc=$? $((SECONDS-T0)) s"; tail -4 $OUT/ops_tests.log
build-gpu/bench/bench_ops_bench --repeats 30 --csv $OUT/ops_brrr.csv --only ceilings,residual_layernorm,bias_gelu,bias_grad > $OUT/bench_a.log 2>&1; echo "bench A rc=$? $((SECONDS-T0)) s"; cat $OUT/ops_brrr.csv
timeout 90 python3 bench/torch_ops.py --repeats 20 --csv $OUT/ops_torch.csv > $OUT/torch_ops.log 2>&1; echo "torch ops rc=$? $((SECONDS-T0)) s"; cat $OUT/ops_torch.csv
timeout 80 ncu --clock-control none -k regex:'ln_|sum_partials|bias_gelu|column_partials' -c 40 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size build-gpu/bench/bench_ops_bench --repeats 1 --only residual_layernorm,bias_gelu,bias_grad > $OUT/ncu.log 2>&1; echo "ncu rc=$? $((SECONDS-T0)) s"
cp core/ops/residual_layernorm.cu /tmp/keep.cu; cp scratch/ln_bwd_generic.cu core/ops/residual_layernorm.cu
ninja -C build-gpu -j16 bench_ops_bench > $OUT/build_b.log 2>&1; echo "build B rc=$? $((SECONDS-T0)) s"
build-gpu/bench/bench_ops_bench --repeats 30 --csv $OUT/ops_b.csv --only residual_layernorm > $OUT/bench_b.log 2>&1; echo "bench B (LN backward without registers) rc=$?"; cat $OUT/ops_b.csv
cp /tmp/keep.cu core/ops/residual_layernorm.cu
left=$(( 585 - (SECONDS-T0) ))
timeout $left compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/ops_tests --gtest_filter='*Cuda*' --gtest_brief=1 > $OUT/sanitizer.log 2>&1; echo "sanitizer rc=$? (timeout $left) $((SECONDS-T0)) s"; tail -3 $OUT/sanitizer.log
