#!/usr/bin/env bash
# Every test, in order, stopping at the first failure (non-zero exit):
# dependencies, host build, cargo fmt --check, clippy (-D warnings), release build + install,
# cargo test (every program also built for sm_90, by clang and ptxas: tests/nvptx_build.rs),
# ggml's test-backend-ops (scripts/test-backend-ops.sh), the ctest C programs,
# the greedy-token comparison against llama.cpp's CPU backend, the multi-device tests
# (scripts/test-multi.sh: two PoCL devices) and the greedy tokens through Mesa's rusticl
# (scripts/test-rusticl.sh: a second OpenCL implementation).
# PoCL caches compiled kernels in ~/.cache/pocl (POCL_CACHE_DIR to move it).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$POLYCL_ROOT"
START=$(date +%s)

stage "1/10 dependencies (scripts/deps.sh, scripts/nvptx-tools.sh)"
bash scripts/deps.sh
# clang, libclc and ptxas: cargo test's tests/nvptx_build.rs builds every program as the
# H200 builds it (POLYCL_PTXAS, from common.sh).
bash scripts/nvptx-tools.sh >/dev/null

stage "2/10 llama.cpp host $HOST_VERSION (scripts/host.sh)"
bash scripts/host.sh
ensure_host

stage "3/10 cargo fmt --check, bash -n scripts/*.sh"
cargo fmt --check
# The scripts CI never runs (bench-gpu.sh and gpu-job.sh run only on the NVIDIA machine, whose
# time is scarce) at least parse.
for script in scripts/*.sh; do bash -n "$script"; done

stage "4/10 cargo clippy --release --all-targets -- -D warnings"
cargo clippy --release --all-targets -- -D warnings

stage "5/10 cargo build --release + install"
build_polycl

stage "6/10 cargo test --release"
# The quant codec tests compare against the real ggml of the pinned host.
POLYCL_GGML_BASE="$HOST_BIN/libggml-base.so" POLYCL_GGML_CPU="$HOST_BIN/libggml-cpu.so" cargo test --release

stage "7/10 test-backend-ops (scripts/test-backend-ops.sh)"
if [[ -f scripts/test-backend-ops.sh ]]; then
  POLYCL_LIB="$POLYCL_LIB" bash scripts/test-backend-ops.sh
else
  echo "skipped: scripts/test-backend-ops.sh does not exist"
fi

stage "8/10 ctest (ctest/)"
if [[ -f ctest/CMakeLists.txt ]]; then
  CTEST_BUILD="$POLYCL_ROOT/target/ctest"
  cmake -S ctest -B "$CTEST_BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DPOLYCL_LIB="$POLYCL_LIB" -DGGML_PREFIX="$HOST_PREFIX" \
    -DPOLYCL_GENERATED_HEADER="$POLYCL_GENERATED_HEADER"
  cmake --build "$CTEST_BUILD" -j "$(nproc)"
  ctest --test-dir "$CTEST_BUILD" --output-on-failure
else
  echo "skipped: ctest/CMakeLists.txt does not exist"
fi

stage "8b/10 reliability: threads, ASan/LSan, valgrind, cargo-fuzz (scripts/test-reliability.sh)"
POLYCL_LIB="$POLYCL_LIB" bash scripts/test-reliability.sh

stage "9/10 greedy tokens: polycl vs CPU (scripts/test-greedy.sh)"
POLYCL_LIB="$POLYCL_LIB" bash scripts/test-greedy.sh
# The plan a GPU gets (fast kernels, fusion passes), built on PoCL.
POLYCL_LIB="$POLYCL_LIB" POLYCL_FAST_KERNELS=1 bash scripts/test-greedy.sh
# That plan with its decode kernels run as phases of the step kernel (one
# work-group on PoCL, so its grid barriers are trivially sound). PoCL builds
# the step program's one large kernel in ~4 minutes from a cold cache (more
# on a loaded machine), inside the first run's time. The GLU launches are
# 512 wide here (POLYCL_GLU_WARPS), and still become 128-wide step phases.
POLYCL_LIB="$POLYCL_LIB" POLYCL_FAST_KERNELS=1 POLYCL_STEP=1 POLYCL_GLU_WARPS=16 GREEDY_TIMEOUT=1500 \
  bash scripts/test-greedy.sh
# That plan as a GPU whose work-groups hold at most 256 work-items gets it:
# without matmul_norm (whose kernel runs 512 a group; its norm the next
# matmuls apply), so the separate norm kernel that every model's first layer
# runs stays tested on every layer; and the GLU at its other extreme width,
# 8 rows a warp.
# Its decode kernels take their buffers as buffer arguments, not by address
# (runtime/addresses.rs; by address is the default, which the runs above take).
POLYCL_LIB="$POLYCL_LIB" POLYCL_FAST_KERNELS=1 POLYCL_MAX_WORK_GROUP=256 POLYCL_GLU_WARPS=4 \
  POLYCL_BUFFER_ADDRESSES=0 bash scripts/test-greedy.sh

# The attention and the O projection in one launch by ticket (plan/attn_o.rs, off by default):
# its waiting groups poll for the attention's, which hold earlier tickets. With the buffers
# that the matvec, norm and rope kernels only read passed by address and the ones they write
# as arguments (POLYCL_BUFFER_ADDRESSES=reads), while the pair takes every buffer as an
# argument.
POLYCL_LIB="$POLYCL_LIB" POLYCL_FAST_KERNELS=1 POLYCL_ATTN_O=1 POLYCL_BUFFER_ADDRESSES=reads \
  bash scripts/test-greedy.sh

stage "9b/10 decode launch budget: fast kernels + fusions (scripts/test-launches.sh)"
POLYCL_LIB="$POLYCL_LIB" bash scripts/test-launches.sh

stage "10/10 several devices: split modes, Q8_1 cache, faults (scripts/test-multi.sh)"
# Stage 6 ran the multi-device cargo tests already.
POLYCL_LIB="$POLYCL_LIB" MULTI_SKIP_CARGO=1 bash scripts/test-multi.sh

stage "10b/10 a second OpenCL implementation: Mesa's rusticl (scripts/test-rusticl.sh)"
# Mesa is unpacked under the cache, not installed (test-rusticl.sh says why).
POLYCL_LIB="$POLYCL_LIB" bash scripts/test-rusticl.sh

stage "10c/10 PoCL 5.0, Ubuntu 24.04's, in a chroot (scripts/test-pocl5.sh)"
POLYCL_LIB="$POLYCL_LIB" bash scripts/test-pocl5.sh

stage "all tests passed ($(($(date +%s) - START)) s)"
