#!/usr/bin/env bash
# 2026-12-07 (seventh session), call 2: batch 64 eager ResNet-50 with fused norms, HEAD against
# HEAD with 5c9ba3d reverted (the only host-side change since the fifth session's call 1), twice
# each, alternating, on one machine; the host's CPU recorded.
#   OUT=$OUT bash bench/results/2026-12-07/h200_recheck/ab.sh
set -uo pipefail
B=build-gpu; R=$OUT/rc; mkdir -p $R; T0=$SECONDS; D=bench/results/2026-12-07/h200_recheck
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/smi.txt
lscpu > $R/lscpu.txt; nproc >> $R/lscpu.txt
if [[ ! -f $B/build.ninja ]]; then
  TORCH_CUDA_ARCH_LIST=9.0 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBRRR_CUDA_MIN_ARCH=90 \
    -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') > $R/cmake.log 2>&1
fi
build() { ninja -C $B -j16 trainer > $R/build_$1.log 2>&1; echo "build $1 rc=$? at $((SECONDS-T0)) s"; cp $B/trainer $B/trainer_$1; }
build head
patch -p1 -R < $D/5c9ba3d.patch > $R/patch.log 2>&1; echo "revert rc=$?"
build before
patch -p1 < $D/5c9ba3d.patch >> $R/patch.log 2>&1; echo "reapply rc=$?"
[[ -f data_cache/photos/.complete ]] || { scripts/prepare_data.sh photos > $R/data.log 2>&1; echo "data rc=$? at $((SECONDS-T0)) s"; }
for i in 1 2; do for v in head before; do
  name=r7_b64_eager_fused_${v}_$i; rm -rf runs/s/$name
  timeout 120 $B/trainer_$v --config configs/blog/07_fused.yaml --set train.cuda_graph=false \
    --set run.name=$name --set run.output_dir=runs/s > $R/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0)) s"
  mkdir -p $R/runs/$name; cp runs/s/$name/{metrics.jsonl,gpu.jsonl,config.yaml} $R/runs/$name/ 2>/dev/null
done; done
python3 bench/summarize_runs.py $R/runs > $R/runs.txt 2>&1; cat $R/runs.txt
grep -E "Model name|^CPU\(s\)|MHz" $R/lscpu.txt
