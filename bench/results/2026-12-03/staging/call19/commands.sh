#!/usr/bin/env bash
# Call 19 (main + scratch/pdl2.patch): sum_partials launched early (programmatic dependent launch) after every first stage;
# BRRR_NO_PDL=1 turns it off (experiment only). Tests + sanitizers with it; bench with and without, alternating.
set -u
T0=$SECONDS
L=/tmp/logs; rm -rf $L; mkdir -p $L
trap 'cd /tmp && tar czf $OUT/logs.tgz logs' EXIT
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
B=build-gpu
{ date -u +%FT%TZ; echo "31e1e36 + working tree (programmatic dependent launch of sum_partials)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $L/meta.txt
git diff -- core/ops > $L/kernel.patch 2>/dev/null
cp scratch/call19.sh $L/commands.sh
[[ -f $B/build.ninja ]] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_PREFIX_PATH="$prefix" > $L/cfg.log 2>&1
ninja -C $B -j16 ops_tests bench_ops_bench > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 300 $B/tests/ops_tests > $L/tests.log 2>&1; echo "ops_tests rc=$? $((SECONDS-T0)) s"; grep -E "FAILED|Failure" $L/tests.log | head -10
n=0
for pdl in on off on off; do
  n=$((n+1))
  if [[ $pdl == off ]]; then export BRRR_NO_PDL=1; else unset BRRR_NO_PDL; fi
  timeout 120 $B/bench/bench_ops_bench --repeats 30 --csv $L/ops_${n}_$pdl.csv > $L/bench_$n.log 2>&1; echo "bench $n pdl $pdl rc=$? $((SECONDS-T0)) s"
  grep -E "bias_grad_(768|2304),(brrr_graph_per|brrr_two_launches_graph_per|copy_half)|residual_bias,brrr_graph_per|mlp_gelu" $L/ops_${n}_$pdl.csv | cut -d, -f1-4 | tr '\n' ' '; echo
done
unset BRRR_NO_PDL
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 $B/tests/ops_tests --gtest_filter='*Cuda*' > $L/san_$tool.log 2>&1; echo "$tool rc=$? $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $L/san_$tool.log | head -2
done
echo "done $((SECONDS-T0)) s"
