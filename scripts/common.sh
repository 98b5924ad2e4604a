# shellcheck shell=bash
# Sourced by the scripts in scripts/: shared paths and helpers. Not run on its own.
# Every path here can be overridden from the environment.

POLYCL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Cache folder outside the clone (host build, models, greedy binary). host.sh uses the same variable.
export POLYCL_CACHE=${POLYCL_CACHE:-/var/cache/polycl}
HOST_VERSION=0.3.36
HOST_PREFIX="$POLYCL_CACHE/llama-cpp-python-$HOST_VERSION"
HOST_SRC="$HOST_PREFIX/src/vendor/llama.cpp"
HOST_BIN="$HOST_PREFIX/build/bin"
# NVIDIA's PTX assembler for tests/nvptx_build.rs (scripts/nvptx-tools.sh installs it).
PTXAS_VERSION=12.9.86
export POLYCL_PTXAS=${POLYCL_PTXAS:-$POLYCL_CACHE/ptxas-$PTXAS_VERSION/ptxas}
# And its disassembler, for scripts/sass-loops.py.
CUOBJDUMP_VERSION=13.5.37
export CUOBJDUMP=${CUOBJDUMP:-$POLYCL_CACHE/cuobjdump-$CUOBJDUMP_VERSION/cuobjdump}
# The plugin as llama.cpp loads it (GGML_BACKEND_PATH needs one file; made absolute).
POLYCL_LIB=${POLYCL_LIB:-$POLYCL_ROOT/target/release/libggml-polycl.so}
POLYCL_LIB=$(realpath -m "$POLYCL_LIB")
# cargo from rustup when the shell did not source ~/.cargo/env.
if [[ -d "$HOME/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
# System pythons of Debian 12 are "externally managed"; pip >= 23.0.1 honours this variable,
# older pips and pyenv/venv pythons ignore it.
export PIP_BREAK_SYSTEM_PACKAGES=1
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

log() { echo "[$(basename "$0" .sh)] $*" >&2; }
die() { echo "[$(basename "$0" .sh)] error: $*" >&2; exit 1; }
stage() { printf '\n==== %s ====\n' "$*"; }
# test-backend-ops' last "N/M tests passed" line in log file $1, leading spaces cut; empty where
# it printed none (it aborted).
tbo_passed_line() { grep -E '^ *[0-9]+/[0-9]+ tests passed' "$1" | tail -n 1 | sed 's/^ *//' || true; }
# Whether such a line ($1) says every test passed: N == M.
tbo_all_passed() { [[ -n $1 ]] && awk -F'[ /]' '{exit !($1==$2)}' <<<"$1"; }

# Installs those of the Debian packages named that are missing (as root).
apt_ensure() {
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    [[ $(id -u) == 0 ]] || die "missing packages (${missing[*]}); run as root or install them"
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    log "apt packages present"
  fi
}

# Runs host.sh (a no-op once built) and checks the tools this repo uses exist.
ensure_host() {
  local prefix
  prefix=$(bash "$POLYCL_ROOT/scripts/host.sh" | tail -n 1)
  [[ "$prefix" == "$HOST_PREFIX" ]] || die "host.sh printed '$prefix', expected $HOST_PREFIX"
  local t
  for t in llama-quantize llama-bench test-backend-ops libllama.so libggml.so libggml-base.so libggml-cpu.so; do
    [[ -e "$HOST_BIN/$t" ]] || die "host build lacks $HOST_BIN/$t (rm $HOST_PREFIX/.built-* and rerun scripts/host.sh)"
  done
}

# gguf-py from the pinned sdist (writes the test models).
ensure_gguf() {
  if python3 -c 'import numpy, gguf; gguf.GGUFWriter' 2>/dev/null; then return 0; fi
  [[ -d "$HOST_SRC/gguf-py" ]] || die "gguf-py missing: run scripts/host.sh first (it fetches the sdist)"
  log "installing gguf-py from $HOST_SRC/gguf-py"
  python3 -m pip install -q "$HOST_SRC/gguf-py" >&2
  python3 -c 'import numpy, gguf; gguf.GGUFWriter' || die "gguf-py still not importable"
}

# Copies the cargo output to the name the scripts give GGML_BACKEND_PATH (new inode: safe
# while a process still maps the old file).
install_plugin() {
  local built="$POLYCL_ROOT/target/release/libggml_polycl.so"
  [[ -f "$built" ]] || die "$built not found: run cargo build --release"
  cp -f "$built" "$POLYCL_LIB.tmp"
  mv -f "$POLYCL_LIB.tmp" "$POLYCL_LIB"
  log "installed $POLYCL_LIB"
}

# cargo build --release, then install_plugin. Sets POLYCL_GENERATED_HEADER to the polycl.h that
# build.rs wrote into this build's OUT_DIR (ctest compares it with include/polycl.h).
build_polycl() {
  local msgs out
  msgs=$(cd "$POLYCL_ROOT" && cargo build --release --message-format=json-render-diagnostics) \
    || die "cargo build --release failed"
  out=$(python3 -c '
import json, sys
dirs = [m["out_dir"] for m in map(json.loads, filter(str.strip, sys.stdin))
        if m.get("reason") == "build-script-executed" and "#ggml-polycl@" in m.get("package_id", "")]
print(dirs[-1] if dirs else "")' <<<"$msgs")
  export POLYCL_GENERATED_HEADER=${out:+$out/polycl.h}
  install_plugin
}

require_plugin() {
  [[ -f "$POLYCL_LIB" ]] || die "plugin $POLYCL_LIB not found (cargo build --release, then install it: scripts/demo.sh does both)"
}

# Compiles examples/greedy.c against the host once per (source, host) and prints the binary's path.
build_greedy() {
  local src="$POLYCL_ROOT/examples/greedy.c"
  local key
  key=$( { sha256sum "$src"; echo "$HOST_PREFIX"; } | sha256sum | cut -c1-12)
  local out="$POLYCL_CACHE/examples/greedy-$key"
  if [[ ! -x "$out" ]]; then
    mkdir -p "$POLYCL_CACHE/examples"
    log "compiling $src"
    ${CC:-cc} -O2 -std=c11 -Wall -Wextra -Werror -o "$out.tmp" "$src" \
      -I"$HOST_SRC/include" -I"$HOST_SRC/ggml/include" \
      -L"$HOST_BIN" -Wl,-rpath,"$HOST_BIN" -lllama -lggml -lggml-base -ldl -lm
    mv -f "$out.tmp" "$out"
  fi
  echo "$out"
}

# Folder of the test models (made by models.sh).
models_dir() {
  local key
  key=$(sha256sum "$POLYCL_ROOT/scripts/make-model.py" | cut -c1-12)
  echo "$POLYCL_CACHE/models-$key"
}
