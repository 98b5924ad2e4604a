#!/usr/bin/env bash
# Builds the pinned ggml host (llama.cpp vendored in llama-cpp-python==0.3.36) once,
# CPU only, into a cache folder outside the clone keyed by version, and reuses it.
# Prints the install prefix on stdout (last line). Idempotent.
set -euo pipefail
HOST_VERSION=0.3.36
CACHE_ROOT=${POLYCL_CACHE:-/var/cache/polycl}
PREFIX="$CACHE_ROOT/llama-cpp-python-$HOST_VERSION"
STAMP="$PREFIX/.built-v2"
JOBS=${JOBS:-$(nproc)}
if [[ -f "$STAMP" ]]; then echo "$PREFIX"; exit 0; fi
mkdir -p "$PREFIX"
log() { echo "[host] $*" >&2; }
if ! command -v cmake >/dev/null || ! python3 -c 'import scikit_build_core' 2>/dev/null; then
  log "installing build prerequisites"
  if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make >&2
  fi
  python3 -m pip install -q scikit-build-core 'cmake>=3.21' >&2
fi
SRC="$PREFIX/src"
if [[ ! -d "$SRC/vendor/llama.cpp" ]]; then
  log "fetching llama-cpp-python==$HOST_VERSION sdist"
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$tmp" "llama-cpp-python==$HOST_VERSION" >&2
  rm -rf "$SRC.tmp"; mkdir -p "$SRC.tmp"
  tar -xzf "$tmp"/llama_cpp_python-$HOST_VERSION.tar.gz -C "$SRC.tmp" --strip-components=1
  # The sdist lacks ggml/ggml.pc.in; an empty file lets the ggml build configure.
  touch "$SRC.tmp/vendor/llama.cpp/ggml/ggml.pc.in"
  mv "$SRC.tmp" "$SRC"; rm -rf "$tmp"
fi
BUILD="$PREFIX/build"
log "configuring (CPU backend as a dynamic backend, shared ggml-base)"
# Not GGML_NATIVE: a native build picks AMX kernels that die with SIGILL on other x86 machines.
cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=ON \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF >&2
log "building with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS" --target test-backend-ops llama-bench llama-quantize llama-simple ggml-cpu >&2
echo "$HOST_VERSION" > "$STAMP"
echo "$PREFIX"
