#!/usr/bin/env bash
# A/B of the residual_layernorm backward's row loops: base, unroll 2, unroll 3 (same call).
set -u
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" > $OUT/cfg.log 2>&1
for v in base unroll2 unroll3; do
  cp /tmp/rln_base.cu core/ops/residual_layernorm.cu 2>/dev/null || cp core/ops/residual_layernorm.cu /tmp/rln_base.cu
  [[ $v != base ]] && patch -p0 core/ops/residual_layernorm.cu < scratch/$v.patch > /dev/null
  grep -c "pragma unroll [23]" core/ops/residual_layernorm.cu
  ninja -C $B -j16 bench_ops_bench > $OUT/build_$v.log 2>&1 || { tail -20 $OUT/build_$v.log; continue; }
  for rep in 1 2; do
    $B/bench/bench_ops_bench --repeats 30 --only ceilings,residual_layernorm,residual_bias --csv $OUT/ops_${v}_$rep.csv > $OUT/bench_${v}_$rep.log 2>&1
    grep -E "ceiling|graph" $OUT/ops_${v}_$rep.csv | sed "s/^/$v $rep /"
  done
done
cp /tmp/rln_base.cu core/ops/residual_layernorm.cu
