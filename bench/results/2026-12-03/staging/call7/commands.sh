#!/usr/bin/env bash
# Call 7: call 6 with a copy of half the rows (the bytes the sum reads, moved) as a reference.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
for i in 1 2; do
  timeout 60 $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_$i.csv > $L/bench_$i.log 2>&1; echo "bench $i rc=$? $((SECONDS-T0)) s"
  grep -E "bias_grad_768,(brrr_graph_per|copy_graph_per|read_|copy_half|brrr_two_launches_graph_per)" $L/ops_$i.csv
done
echo "done $((SECONDS-T0)) s"
