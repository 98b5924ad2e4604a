#!/usr/bin/env bash
# Installs what polycl's build, tests and demo need on Debian 12, as root. Idempotent:
# apt-get runs only when a package is missing, pip only when a module is missing.
# gguf-py comes from the pinned llama.cpp sdist, so it is installed here only once
# scripts/host.sh has fetched the source (models.sh installs it otherwise).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

APT_PACKAGES=(
  pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev clinfo  # OpenCL: CPU devices + loader
  cmake g++ gcc make pkg-config git                               # host build, ctest, greedy.c
  python3 python3-pip ca-certificates                             # sdist fetch, model maker
)

apt_ensure "${APT_PACKAGES[@]}"

# Python side: numpy for the model maker, scikit-build-core + cmake>=3.21 for the sdist fetch.
py_missing=()
python3 -c 'import numpy' 2>/dev/null || py_missing+=(numpy)
python3 -c 'import scikit_build_core' 2>/dev/null || py_missing+=(scikit-build-core)
cmake_ok=$(cmake --version 2>/dev/null | awk 'NR==1{split($3,v,"."); print (v[1]>3 || (v[1]==3 && v[2]>=21)) ? 1 : 0}')
[[ "$cmake_ok" == 1 ]] || py_missing+=('cmake>=3.21')
if ((${#py_missing[@]})); then
  log "pip install ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}"
  hash -r
else
  log "python modules present"
fi
if [[ -d "$HOST_SRC/gguf-py" ]]; then
  ensure_gguf
else
  log "gguf-py: installed after scripts/host.sh fetched the sdist (models.sh does it)"
fi

# Rust: preinstalled through rustup; fmt and clippy are needed by scripts/test.sh.
if ! command -v cargo >/dev/null; then
  die "cargo not found. Install Rust (https://rustup.rs: curl -sSf https://sh.rustup.rs | sh -s -- -y), then rerun."
fi
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  command -v rustup >/dev/null || die "cargo fmt / cargo clippy missing and no rustup to add them"
  log "rustup component add rustfmt clippy"
  rustup component add rustfmt clippy
fi

# OpenCL: at least one platform should be visible (PoCL's CPU device at minimum).
if ! clinfo -l 2>/dev/null | grep -q 'Device'; then
  log "warning: clinfo lists no OpenCL device (check /etc/OpenCL/vendors/)"
else
  clinfo -l 2>/dev/null | sed 's/^/[deps] /' >&2
fi
log "ok"
