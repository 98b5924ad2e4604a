#!/usr/bin/env bash
# A second OpenCL implementation: Mesa's rusticl (Debian 12's mesa-opencl-icd, Mesa 22.3) on its
# llvmpipe CPU device, where PoCL is the first. Its compiler (clang to SPIR-V to NIR to LLVM)
# is another reading of polycl's OpenCL C than PoCL's, and rusticl is the OpenCL of AMD's and
# Intel's GPUs on Mesa (radeonsi, iris). The greedy-token oracle (scripts/test-greedy.sh: four
# models, flash attention off and on, against the CPU backend) runs through it with the
# portable kernels and with the plan a GPU gets (POLYCL_FAST_KERNELS=1).
# The package is unpacked under $POLYCL_CACHE, not installed: installed, its ICD files would
# put Mesa's libraries into every OpenCL program on the machine, and LeakSanitizer reports
# their allocations as leaks in the reliability stage. Its dependencies are installed.
# Only rusticl's ICD is visible to these runs (OCL_ICD_VENDORS), so POLYCL0 is llvmpipe.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

mapfile -t deps < <(apt-cache depends mesa-opencl-icd | awk '/^  Depends:/ {print $2}' | grep -v '^<')
apt_ensure "${deps[@]}"
version=$(apt-cache policy mesa-opencl-icd | awk '/Candidate:/ {print $2}')
MESA="$POLYCL_CACHE/mesa-opencl-icd-${version//[^A-Za-z0-9.+-]/_}"
if [[ ! -f "$MESA/usr/lib/x86_64-linux-gnu/libRusticlOpenCL.so.1" ]]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download mesa-opencl-icd >/dev/null) || die "apt-get download mesa-opencl-icd failed"
  rm -rf "$MESA.tmp" && dpkg -x "$tmp"/mesa-opencl-icd_*.deb "$MESA.tmp" && rm -rf "$MESA" && mv "$MESA.tmp" "$MESA"
  rm -rf "$tmp"
fi
require_plugin
ensure_host
GREEDY=$(build_greedy)
ICD=$(mktemp -d)
trap 'rm -rf "$ICD"' EXIT
echo "$MESA/usr/lib/x86_64-linux-gnu/libRusticlOpenCL.so.1" > "$ICD/rusticl.icd"
export OCL_ICD_VENDORS=$ICD RUSTICL_ENABLE=llvmpipe

devices=$(GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" --list-devices 2>&1) || true
echo "$devices" | grep -E '^POLYCL' || true
grep -qE $'^POLYCL0\t.*llvmpipe' <<<"$devices" || die "polycl offers no rusticl llvmpipe device as POLYCL0"

stage "rusticl: greedy tokens, portable kernels"
bash "$POLYCL_ROOT/scripts/test-greedy.sh"
stage "rusticl: greedy tokens, the plan a GPU gets (POLYCL_FAST_KERNELS=1)"
POLYCL_FAST_KERNELS=1 bash "$POLYCL_ROOT/scripts/test-greedy.sh"
