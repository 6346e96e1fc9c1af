#!/bin/bash
# compile each core/ops .cu for sm_90 only, from tree $1 into $2, dump SASS
src=$1; out=$2; mkdir -p $out
T=/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch
for f in bias_gelu fused_classifier image_input linear_bias residual_layernorm; do
  nice /usr/local/cuda/bin/nvcc -DFMT_SHARED -DUSE_C10D_GLOO -DUSE_C10D_NCCL -DUSE_DISTRIBUTED -I/work/main/build/fmt_shim -I$src -I/work/main/build/generated \
   -isystem=$T/include -isystem=$T/include/torch/csrc/api/include -isystem=/usr/local/cuda/include \
   -Xcudafe --diag_suppress=cc_clobber_ignored,--diag_suppress=field_without_dll_interface,--diag_suppress=base_class_has_different_dll_interface,--diag_suppress=dll_interface_conflict_none_assumed,--diag_suppress=dll_interface_conflict_dllexport_assumed,--diag_suppress=bad_friend_decl \
   --expt-relaxed-constexpr --expt-extended-lambda -O3 -DNDEBUG -gencode arch=compute_90,code=sm_90 -Xcompiler=-fPIC -std=c++20 -x cu -c $src/core/ops/$f.cu -o $out/$f.o || echo FAIL $f
  /root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/triton/backends/nvidia/bin/cuobjdump -sass $out/$f.o > $out/$f.sass
done
