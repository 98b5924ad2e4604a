#!/usr/bin/env bash
# Every test, in order, stopping at the first failure (non-zero exit):
# dependencies, host build, cargo fmt --check, clippy (-D warnings), release build + install,
# cargo test, ggml's test-backend-ops (scripts/test-backend-ops.sh), the ctest C programs,
# and the greedy-token comparison against llama.cpp's CPU backend.
# PoCL caches compiled kernels in ~/.cache/pocl (POCL_CACHE_DIR to move it).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$POLYCL_ROOT"
START=$(date +%s)

stage "1/9 dependencies (scripts/deps.sh)"
bash scripts/deps.sh

stage "2/9 llama.cpp host $HOST_VERSION (scripts/host.sh)"
bash scripts/host.sh
ensure_host

stage "3/9 cargo fmt --check"
cargo fmt --check

stage "4/9 cargo clippy --release -- -D warnings"
cargo clippy --release -- -D warnings

stage "5/9 cargo build --release + install"
build_polycl

stage "6/9 cargo test --release"
cargo test --release

stage "7/9 test-backend-ops (scripts/test-backend-ops.sh)"
if [[ -f scripts/test-backend-ops.sh ]]; then
  POLYCL_LIB="$POLYCL_LIB" bash scripts/test-backend-ops.sh
else
  echo "skipped: scripts/test-backend-ops.sh does not exist"
fi

stage "8/9 ctest (ctest/)"
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

stage "9/9 greedy tokens: polycl vs CPU (scripts/test-greedy.sh)"
POLYCL_LIB="$POLYCL_LIB" bash scripts/test-greedy.sh

stage "all tests passed ($(($(date +%s) - START)) s)"
