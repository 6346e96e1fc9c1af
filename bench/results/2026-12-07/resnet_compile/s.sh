#!/usr/bin/env bash
# 2026-12-07 (third session): ResNet-50's training step, brrr against torch.compile, one call.
# Steps (STEPS, in order): build (sm_90 only, the ResNet step bench), brrr (its synthetic-batch
# step), probe (cudnn_bn_probe.py: cuDNN's batch norm with the ReLU and the add in its kernel),
# torch (PyTorch eager + torch.compile; + the whole-step graph with TGRAPH=1), optest
# (batch_norm_act's tests: cuDNN's fused path against the reference; ResNet fused against
# unfused), memcheck (compute-sanitizer on the op's GPU test).
#   call 1 (12:58Z): STEPS="probe build optest brrr torch" BATCHES=64,256
#   call 2, not run (no device time left): STEPS="build optest memcheck"
#           BUILD_TARGETS="tests/ops_tests tests/models_tests" (the ResNet test as rewritten)
#   call: STEPS="build brrr torch" (expectations in expect.md, written before it)
set -uo pipefail
B=build-gpu; R=$OUT/rc; mkdir -p $R
T0=$SECONDS; LIMIT=${LIMIT:-585}
left() { echo $(( LIMIT - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/smi.txt
echo "$(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) STEPS=${STEPS:-}" >> $R/dates.txt
BATCHES=${BATCHES:-64,256}
for step in ${STEPS:-build brrr torch}; do
case $step in
build)
  if [[ ! -f $B/build.ninja ]]; then
    TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRRR_CUDA_MIN_ARCH=90 \
      -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') > $R/cmake.log 2>&1
    echo "cmake rc=$? at $((SECONDS-T0)) s"
  fi
  timeout $(( $(left) - 5 )) ninja -C $B -j16 ${BUILD_TARGETS:-bench/bench_resnet_step_bench tests/ops_tests tests/models_tests} > $R/build.log 2>&1
  echo "build rc=$? at $((SECONDS-T0)) s"; grep -E 'error|FAILED' $R/build.log | head -20 ;;
brrr)
  timeout $(( $(left) - 3 )) $B/bench/bench_resnet_step_bench --batches $BATCHES --steps 30 --warmup 10 \
    --channels-last true --fused both --csv $R/brrr_step.csv > $R/brrr_step.log 2>&1
  echo "brrr step rc=$? at $((SECONDS-T0)) s"; cat $R/brrr_step.csv ;;
optest)
  timeout 120 $B/tests/ops_tests --gtest_filter='BatchNormAct*' > $R/optest.log 2>&1
  echo "op test rc=$? at $((SECONDS-T0)) s"; grep -E "OK|FAILED|Failure|error|Expected|Which|rel_error|seed" $R/optest.log | head -40
  timeout 120 $B/tests/models_tests --gtest_filter='ResNetTest.Cuda*' > $R/resnet_test.log 2>&1
  echo "resnet test rc=$? at $((SECONDS-T0)) s"; grep -E "OK \]|FAILED|Failure|error|Expected|Which|step" $R/resnet_test.log | head -40 ;;
memcheck)
  timeout $(( $(left) - 3 )) compute-sanitizer --tool memcheck $B/tests/ops_tests \
    --gtest_filter='BatchNormActCudaTest*' > $R/memcheck.log 2>&1
  echo "memcheck rc=$? at $((SECONDS-T0)) s"; grep -E "ERROR SUMMARY|OK \]|FAILED" $R/memcheck.log ;;
probe)
  timeout $(( $(left) - 3 )) python3 bench/results/2026-12-07/resnet_compile/cudnn_bn_probe.py \
    --batch ${BATCHES##*,} --repeats 20 > $R/probe.csv 2> $R/probe.err
  echo "probe rc=$? at $((SECONDS-T0)) s"; cat $R/probe.csv; tail -5 $R/probe.err ;;
torch)
  timeout $(( $(left) - 3 )) python3 bench/torch_resnet_step.py --batches $BATCHES --steps 30 --warmup 10 \
    --channels-last true --compile ${TGRAPH:+--graph} --csv $R/torch_step.csv > $R/torch_step.log 2>&1
  echo "torch step rc=$? at $((SECONDS-T0)) s"; cat $R/torch_step.csv; grep '^#' $R/torch_step.log ;;
esac
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $R/smi.txt
