#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine as root: install the dependencies, build the
# pinned llama.cpp host, build and install polycl, make the test models, then generate text
# greedily from a text prompt through polycl's OpenCL device and through llama.cpp's own CPU
# backend, and print both speeds side by side.
#
# Environment: POLYCL_LIB, DEMO_DEV (POLYCL0), DEMO_MODEL (Q4_0; or F16 Q8_0 Q4_K_M),
# DEMO_PROMPT, DEMO_TOKENS (64), DEMO_THREADS (CPU threads, 1). The models have random
# weights, so the text is word salad; what matters is that both backends give the same tokens.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$POLYCL_ROOT"

DEV=${DEMO_DEV:-POLYCL0}
QUANT=${DEMO_MODEL:-Q4_0}
PROMPT=${DEMO_PROMPT:-"the man said that he was one of the people who could find water and work on the side"}
NTOK=${DEMO_TOKENS:-64}
# ggml's CPU worker threads spin at every barrier: on this tiny model one thread is the CPU
# backend's best setting (two threads on a busy two-core machine can be 1000x slower).
THREADS=${DEMO_THREADS:-1}

stage "dependencies (scripts/deps.sh)"
bash scripts/deps.sh
stage "llama.cpp host $HOST_VERSION (scripts/host.sh)"
bash scripts/host.sh
ensure_host
stage "polycl (cargo build --release)"
build_polycl
stage "test models (scripts/models.sh)"
MDIR=$(bash scripts/models.sh | tail -n 1)
MODEL="$MDIR/model-$QUANT.gguf"
GREEDY=$(build_greedy)

stage "OpenCL devices seen by polycl"
GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" --list-devices | grep -v $'\tCPU\t' || true
GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" --list-devices | grep -q "^$DEV"$'\t' \
  || die "polycl offers no device $DEV (POLYCL_LOG=1 shows why)"

stage "greedy generation: $NTOK tokens, model $(basename "$MODEL")"
echo "prompt: $PROMPT"
GEN=(-m "$MODEL" -p "$PROMPT" -n "$NTOK" -b 64 --fa on --warmup -t "$THREADS")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" "${GEN[@]}" --dev "$DEV" >"$WORK/dev.out" \
  || die "generation through $DEV failed"
env -u GGML_BACKEND_PATH "$GREEDY" "${GEN[@]}" --dev none >"$WORK/cpu.out" \
  || die "generation on the CPU backend failed"

get() { sed -n "s/^$1: *//p" "$2"; }
echo
echo "[$DEV] $(get text "$WORK/dev.out")"
echo "[CPU]     $(get text "$WORK/cpu.out")"
echo
speed() { get speed "$1" | sed -E 's/prompt ([0-9.]+) tok\/s, decode ([0-9.]+) tok\/s/\1 \2/'; }
read -r dpp dtg <<<"$(speed "$WORK/dev.out")"
read -r cpp ctg <<<"$(speed "$WORK/cpu.out")"
printf '%-22s %16s %16s\n' "backend" "prompt tok/s" "decode tok/s"
printf '%-22s %16s %16s\n' "polycl $DEV (OpenCL)" "$dpp" "$dtg"
printf '%-22s %16s %16s\n' "llama.cpp CPU" "$cpp" "$ctg"
if [[ "$(get tokens "$WORK/dev.out")" == "$(get tokens "$WORK/cpu.out")" ]]; then
  echo "same tokens on both backends: yes"
else
  echo "same tokens on both backends: NO"
fi
