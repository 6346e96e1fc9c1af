#!/usr/bin/env bash
# Installs everything brrr needs on a fresh Debian/Ubuntu machine (run as root). Idempotent: a
# second run installs nothing and takes a second or two.
#  - apt: compiler, CMake, ninja, ccache, yaml-cpp, fmt, GoogleTest, libjpeg-turbo, libpng, zlib,
#         Gloo's headers (c10d's CPU backend in libtorch needs them to be used), rsvg-convert (the report's PNGs), and the real data the quickstart and the text configs
#         use (Fashion-MNIST, fortunes).
#  - pip: PyTorch 2.13.0 (its libtorch is what brrr links; PyPI's build is the CUDA 13.0 one),
#         only when no torch is importable; tensorboard and Pillow (used by tests), when missing.
# With a CUDA toolkit (nvcc) on the machine, brrr compiles its CUDA sources; without one it builds
# the CPU configuration from the same libtorch (cmake/brrrFindTorch.cmake says so).
set -euo pipefail

APT_PACKAGES=(
  g++ make cmake ninja-build ccache pkg-config git python3 python3-pip
  libyaml-cpp-dev libfmt-dev libgtest-dev libgmock-dev
  libjpeg-dev libpng-dev zlib1g-dev librsvg2-bin libgloo-dev
  dataset-fashion-mnist fortunes
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# A newer cmake outside apt (e.g. /usr/local/bin/cmake) is fine: don't install Debian's over it.
if command -v cmake >/dev/null 2>&1; then
  missing=("${missing[@]/cmake}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if ((${#missing[@]})); then
  echo "setup: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
pip_install() {
  # Debian's system python refuses pip without this flag (PEP 668); a pyenv/venv python ignores it.
  "$PY" -m pip install -q --break-system-packages "$@" 2>/dev/null || "$PY" -m pip install -q "$@"
}
TORCH_VERSION=2.13.0
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "setup: pip install torch==${TORCH_VERSION}"
  pip_install "torch==${TORCH_VERSION}"
fi
# Test-only Python packages: tensorboard reads our event files back, Pillow writes image fixtures,
# safetensors writes and reads weight files on PyTorch's side.
if ! "$PY" -c 'import tensorboard' >/dev/null 2>&1; then
  echo "setup: pip install tensorboard==2.21.0"
  pip_install tensorboard==2.21.0
fi
if ! "$PY" -c 'import PIL' >/dev/null 2>&1; then
  echo "setup: pip install pillow==13.0.0"
  pip_install "pillow==13.0.0"
fi
if ! "$PY" -c 'import safetensors' >/dev/null 2>&1; then
  echo "setup: pip install safetensors==0.7.0"
  pip_install "safetensors==0.7.0"
fi
cuda="no nvcc: the CUDA sources will be off"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda="nvcc found: the CUDA sources will be compiled"
fi
echo "setup: ok ($("$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'); ${cuda})"
