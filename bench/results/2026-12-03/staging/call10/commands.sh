#!/usr/bin/env bash
# Call 10 (commit 5e72f91): the st.async tail kept; the bench after folding the half-row copy's loop; torch.compile's column sum in the same call.
set -u
T0=$SECONDS
L=/tmp/logs; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo 5e72f91; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 60 $B/tests/ops_tests --gtest_filter='LinearBias*' --gtest_brief=1 > $L/tests.log 2>&1; echo "tests rc=$?"
for i in 1 2; do
  timeout 60 $B/bench/bench_ops_bench --repeats 30 --only ceilings,bias_grad --csv $L/ops_$i.csv > $L/bench_$i.log 2>&1; echo "bench $i rc=$? $((SECONDS-T0)) s"
  grep -E "bias_grad_768,(brrr_graph_per|copy_graph_per|read_|copy_half|brrr_two_launches_graph_per)" $L/ops_$i.csv
done
timeout 200 python3 bench/torch_ops.py --repeats 30 --only bias_grad --csv $L/torch_ops.csv > $L/torch_ops.log 2>&1; echo "torch_ops rc=$? $((SECONDS-T0)) s"
cat $L/torch_ops.csv
echo "done $((SECONDS-T0)) s"
