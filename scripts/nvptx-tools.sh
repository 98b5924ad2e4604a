#!/usr/bin/env bash
# Installs what tests/nvptx_build.rs needs to build every program as an sm_90 GPU (the H200)
# builds it, without one: clang-15, LLVM 15's tools and libclc-15 from Debian, and ptxas from
# NVIDIA's nvidia-cuda-nvcc-cu12 wheel on PyPI (only that one file is kept), into
# $POLYCL_CACHE/ptxas-$PTXAS_VERSION. Idempotent; prints ptxas's path last.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

apt_ensure clang-15 llvm-15 libclc-15

if [[ ! -x "$POLYCL_PTXAS" ]]; then
  log "ptxas $PTXAS_VERSION from PyPI (nvidia-cuda-nvcc-cu12)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps -d "$tmp" "nvidia-cuda-nvcc-cu12==$PTXAS_VERSION"
  mkdir -p "$(dirname "$POLYCL_PTXAS")"
  python3 - "$tmp"/*.whl "$POLYCL_PTXAS.part" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("nvidia/cuda_nvcc/bin/ptxas"))
PY
  chmod +x "$POLYCL_PTXAS.part"
  mv "$POLYCL_PTXAS.part" "$POLYCL_PTXAS"
fi
"$POLYCL_PTXAS" --version | tail -n 1 >&2
echo "$POLYCL_PTXAS"
