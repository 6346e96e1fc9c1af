#!/bin/bash
# Device call: build (sm_90 only), op GPU tests, repeats, benches (new LN vs old LN), sanitizer, torch ops.
set -u
T0=$SECONDS
P=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
{ date -u +%FT%TZ; echo "commit ${BRRR_COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c 'import torch;print(torch.__version__)'; } > $OUT/meta.txt
if [ ! -f build-gpu/build.ninja ]; then
  TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$P -DCMAKE_CUDA_ARCHITECTURES=90-real > $OUT/cmake.log 2>&1 || { tail -30 $OUT/cmake.log; exit 1; }
fi
ninja -C build-gpu -j16 ops_tests bench_ops_bench > $OUT/build.log 2>&1 || { grep -B2 -A20 "error" $OUT/build.log | head -80; exit 1; }
echo "build done $((SECONDS-T0)) s"
build-gpu/tests/ops_tests --gtest_filter='*Cuda*' --gtest_brief=1 > $OUT/ops_tests.log 2>&1; echo "ops cuda tests rc=$? $((SECONDS-T0)) s"; tail -5 $OUT/ops_tests.log
build-gpu/tests/ops_tests --gtest_filter="${REPEAT_FILTER}" --gtest_repeat=${REPEATS:-8} --gtest_brief=1 > $OUT/repeat.log 2>&1; echo "repeat rc=$? $((SECONDS-T0)) s"; grep -c FAILED $OUT/repeat.log
build-gpu/bench/bench_ops_bench --repeats 30 --csv $OUT/ops_new.csv --only "${BENCH_ONLY}" > $OUT/bench_new.log 2>&1; echo "bench new rc=$? $((SECONDS-T0)) s"
cat $OUT/ops_new.csv
if [ -n "${OLD_SWAP:-}" ]; then
  cp "${OLD_SWAP#*:}" /tmp/keep.cu; cp "${OLD_SWAP%%:*}" "${OLD_SWAP#*:}"
  ninja -C build-gpu -j16 bench_ops_bench > $OUT/build_old.log 2>&1; echo "build old rc=$? $((SECONDS-T0)) s"
  build-gpu/bench/bench_ops_bench --repeats 30 --csv $OUT/ops_old.csv --only "${BENCH_OLD_ONLY}" > $OUT/bench_old.log 2>&1; echo "bench old rc=$?"
  cat $OUT/ops_old.csv
  cp /tmp/keep.cu "${OLD_SWAP#*:}"
fi
timeout ${SAN_S:-150} compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/ops_tests --gtest_filter="${SAN_FILTER:-*Cuda*}" --gtest_brief=1 > $OUT/sanitizer.log 2>&1; echo "sanitizer rc=$? $((SECONDS-T0)) s"; tail -3 $OUT/sanitizer.log
left=$(( ${LIMIT_S:-590} - (SECONDS-T0) - 10 ))
if [ -n "${TORCH_OPS:-}" ] && [ $left -gt 60 ]; then
  timeout $left python3 bench/torch_ops.py --repeats 20 --csv $OUT/ops_torch.csv > $OUT/torch_ops.log 2>&1; echo "torch ops rc=$? $((SECONDS-T0)) s"; cat $OUT/ops_torch.csv
fi
echo "all done $((SECONDS-T0)) s"
