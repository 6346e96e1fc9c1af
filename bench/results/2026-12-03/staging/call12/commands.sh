#!/usr/bin/env bash
# Call 12 (working tree on 8b9a5fd): column_sum one launch in clusters of 8..16 blocks (runtime size, chosen by the SMs load: 11 on an H200 for 768 bf16), loads ahead of adds in two branches. Tests; bench twice.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo "8b9a5fd + working tree (cluster size)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 120 $B/tests/ops_tests --gtest_filter='LinearBias*' > $L/tests.log 2>&1; echo "tests rc=$? $((SECONDS-T0)) s"; grep -E "OK \]|FAILED|Failure|error" $L/tests.log | head -20
for i in 1 2; do
  timeout 90 $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_$i.csv > $L/bench_$i.log 2>&1; echo "bench $i rc=$? $((SECONDS-T0)) s"
  grep -E "bias_grad_768,(brrr_graph_per|copy_graph_per|copy_half|brrr_two_launches_graph_per|brrr_clusters)" $L/ops_$i.csv
done
echo "done $((SECONDS-T0)) s"
