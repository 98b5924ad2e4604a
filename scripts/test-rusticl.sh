#!/usr/bin/env bash
# A second OpenCL implementation: Mesa's rusticl (Debian 12's mesa-opencl-icd, Mesa 22.3) on its
# llvmpipe CPU device, where PoCL is the first. Its compiler (clang to SPIR-V to NIR to LLVM)
# is another reading of polycl's OpenCL C than PoCL's, and rusticl is the OpenCL of AMD's and
# Intel's GPUs on Mesa (radeonsi, iris). The greedy-token oracle (scripts/test-greedy.sh: four
# models, flash attention off and on, against the CPU backend) runs through it with the
# portable kernels and with the plan a GPU gets (POLYCL_FAST_KERNELS=1).
# Only rusticl's ICD is visible to these runs (OCL_ICD_VENDORS), so POLYCL0 is llvmpipe.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

apt_ensure mesa-opencl-icd
require_plugin
ensure_host
GREEDY=$(build_greedy)
ICD=$(mktemp -d)
trap 'rm -rf "$ICD"' EXIT
cp /etc/OpenCL/vendors/rusticl.icd "$ICD/"
export OCL_ICD_VENDORS=$ICD RUSTICL_ENABLE=llvmpipe

devices=$(GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" --list-devices 2>&1) || true
echo "$devices" | grep -E '^POLYCL' || true
grep -qE $'^POLYCL0\t.*llvmpipe' <<<"$devices" || die "polycl offers no rusticl llvmpipe device as POLYCL0"

stage "rusticl: greedy tokens, portable kernels"
bash "$POLYCL_ROOT/scripts/test-greedy.sh"
stage "rusticl: greedy tokens, the plan a GPU gets (POLYCL_FAST_KERNELS=1)"
POLYCL_FAST_KERNELS=1 bash "$POLYCL_ROOT/scripts/test-greedy.sh"
