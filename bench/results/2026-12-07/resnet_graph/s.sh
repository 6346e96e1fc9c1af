#!/usr/bin/env bash
# 2026-12-07 (fifth session): batch_norm_act inside the CUDA-graph step, one call.
# Steps (STEPS, in order): build (sm_90 only), tests (the op's, ResNet's and the graph tests),
# memcheck (compute-sanitizer on the op's GPU tests, graphed included), rungs (ResNet-50 from
# JPEGs: rungs 6 and 7 at batch 64, 7 eager, rung 5 at batch 256 unfused and fused), graphtest
# (the graphed op test alone, and under memcheck), opbench (batch_norm_act per op: brrr, ATen
# eager, PyTorch eager and torch.compile, with the copy ceiling).
#   call 1 (15:25Z, an H100): OUT=$OUT STEPS="build tests memcheck rungs" bash bench/results/2026-12-07/resnet_graph/s.sh
#   call 2: BUILD_TARGETS="tests/trainer_tests bench/bench_ops_bench" STEPS="build graphtest opbench"
set -uo pipefail
B=build-gpu; R=$OUT/rc; mkdir -p $R
T0=$SECONDS; LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/smi.txt
echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) STEPS=${STEPS:-}" >> $R/dates.txt
rung() {  # rung NAME CONFIG [--set k=v ...]
  local name=$1 config=$2; shift 2
  rm -rf runs/s/$name
  timeout $(( $(left) - 3 )) $B/trainer --config configs/blog/$config.yaml --set run.name=$name \
    --set run.output_dir=runs/s "$@" > $R/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0)) s: $(grep -E 'done:' $R/$name.log | tail -1)"
  mkdir -p $R/runs/$name; cp runs/s/$name/{metrics.jsonl,gpu.jsonl,config.yaml} $R/runs/$name/ 2>/dev/null
}
for step in ${STEPS:-build tests memcheck rungs}; do
case $step in
build)
  if [[ ! -f $B/build.ninja ]]; then
    TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRRR_CUDA_MIN_ARCH=90 \
      -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') > $R/cmake.log 2>&1
    echo "cmake rc=$? at $((SECONDS-T0)) s"
  fi
  timeout $(( $(left) - 5 )) ninja -C $B -j16 ${BUILD_TARGETS:-trainer tests/ops_tests tests/models_tests tests/trainer_tests} > $R/build.log 2>&1
  echo "build rc=$? at $((SECONDS-T0)) s"; grep -E 'error|FAILED' $R/build.log | head -20 ;;
tests)
  timeout 120 $B/tests/ops_tests --gtest_filter='BatchNormAct*' > $R/optest.log 2>&1
  echo "op test rc=$? at $((SECONDS-T0)) s"; grep -E "OK \]|FAILED|Failure|Expected|Which|rel_error|seed|differ" $R/optest.log | head -30
  timeout 150 $B/tests/models_tests --gtest_filter='ResNetTest.Cuda*' > $R/resnet_test.log 2>&1
  echo "resnet test rc=$? at $((SECONDS-T0)) s"; grep -E "OK \]|FAILED|Failure|Expected|Which|step|err" $R/resnet_test.log | head -30
  timeout 200 $B/tests/trainer_tests --gtest_filter='CudaGraphTest.*' > $R/graph_test.log 2>&1
  echo "graph tests rc=$? at $((SECONDS-T0)) s"; grep -E "OK \]|FAILED|Failure|Expected|Which|step|difference|took" $R/graph_test.log | head -40 ;;
memcheck)
  timeout $(( $(left) - 3 )) compute-sanitizer --tool memcheck $B/tests/ops_tests \
    --gtest_filter='BatchNormActCudaTest*' > $R/memcheck_op.log 2>&1
  echo "memcheck op rc=$? at $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|OK \]|FAILED" $R/memcheck_op.log
  timeout $(( $(left) - 3 )) compute-sanitizer --tool memcheck $B/tests/trainer_tests \
    --gtest_filter='CudaGraphTest.BatchNormAct*' > $R/memcheck_graph.log 2>&1
  echo "memcheck graph rc=$? at $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|OK \]|FAILED" $R/memcheck_graph.log ;;
rungs)
  [[ -f data_cache/photos/.complete ]] || { scripts/prepare_data.sh photos > $R/data.log 2>&1; echo "data rc=$? at $((SECONDS-T0)) s"; }
  rung r6_b64_graph_unfused 06_cuda_graph
  rung r7_b64_graph_fused 07_fused
  rung r7_b64_eager_fused 07_fused --set train.cuda_graph=false
  rung r5_b256_unfused 05_large_batch
  rung r5_b256_fused 05_large_batch --set model.fused=auto
  python3 bench/summarize_runs.py $R/runs > $R/runs.txt 2>&1; cat $R/runs.txt ;;
graphtest)
  timeout 120 $B/tests/trainer_tests --gtest_filter='CudaGraphTest.BatchNormAct*' > $R/graph_op_test.log 2>&1
  echo "graph op test rc=$? at $((SECONDS-T0)) s"; grep -E "OK \]|FAILED|Failure|Expected|difference|took" $R/graph_op_test.log | head -30
  timeout $(( $(left) - 3 )) compute-sanitizer --tool memcheck $B/tests/trainer_tests \
    --gtest_filter='CudaGraphTest.BatchNormAct*' > $R/memcheck_graph.log 2>&1
  echo "memcheck graph rc=$? at $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|OK \]|FAILED" $R/memcheck_graph.log ;;
opbench)
  timeout $(( $(left) - 3 )) $B/bench/bench_ops_bench --repeats 30 --only ceilings,batch_norm_act \
    --csv $R/ops_brrr.csv > $R/ops_brrr.log 2>&1
  echo "ops bench rc=$? at $((SECONDS-T0)) s"; cat $R/ops_brrr.csv
  timeout $(( $(left) - 3 )) python3 bench/torch_ops.py --repeats 30 --only batch_norm_act \
    --csv $R/ops_torch.csv > $R/ops_torch.log 2>&1
  echo "torch ops rc=$? at $((SECONDS-T0)) s"; cat $R/ops_torch.csv; tail -3 $R/ops_torch.log ;;
esac
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $R/smi.txt
