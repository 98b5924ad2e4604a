#!/usr/bin/env bash
# Greedy-token oracle: for each test model (F16, Q8_0, Q4_0, Q4_K_M) and flash attention
# off/on, and for quantized KV caches, the tokens generated through polycl
# (GGML_BACKEND_PATH=$POLYCL_LIB, --dev POLYCL0) must equal those of llama.cpp's CPU backend
# (no GGML_BACKEND_PATH, --dev none).
# Prompt: 40 synthetic tokens decoded in batches of 16; 32 generated tokens.
#
# Environment: POLYCL_LIB (default target/release/libggml-polycl.so), GREEDY_DEV (default
# POLYCL0), GREEDY_MODELS (default "F16 Q8_0 Q4_0 Q4_K_M"), GREEDY_TIMEOUT (s per run, 600),
# GREEDY_THREADS (CPU threads of both runs, default 1), GREEDY_CACHES (quantized KV cache types
# tried with the first model, fa on; default "q8_0 q4_0").
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DEV=${GREEDY_DEV:-POLYCL0}
read -r -a MODELS <<<"${GREEDY_MODELS:-F16 Q8_0 Q4_0 Q4_K_M}"
TIMEOUT=${GREEDY_TIMEOUT:-600}
# One CPU thread: with ggml's spinning worker threads, 2 threads on a busy 2-core machine can be
# 1000x slower; the tokens do not depend on the thread count.
ARGS=(--prompt-tokens 40 -b 16 -n 32 --margins -t "${GREEDY_THREADS:-1}")

require_plugin
ensure_host
GREEDY=$(build_greedy)
MDIR=$(bash "$POLYCL_ROOT/scripts/models.sh" | tail -n 1)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

field() { sed -n "s/^$1: *//p" "$2"; }

# Prints the first differing position of two token lists, the CPU margin there.
explain() {
  local -a a b m
  local i
  read -r -a a <<<"$1"
  read -r -a b <<<"$2"
  read -r -a m <<<"$3"
  for ((i = 0; i < ${#a[@]}; i++)); do
    if [[ "${a[i]}" != "${b[i]:-}" ]]; then
      echo "first difference at step $i; CPU top1-top2 logit margin there: ${m[i]:-?}"
      return
    fi
  done
  echo "token counts differ"
}

pass=0
fail=0
# One case: NAME MODEL FA [greedy arguments...], CPU against $DEV.
check() {
  local name=$1 model=$2 fa=$3 t0 t1 t2 rc ref got times
  shift 3
  t0=$(date +%s.%N)
  rc=0
  env -u GGML_BACKEND_PATH timeout "$TIMEOUT" "$GREEDY" -m "$model" --fa "$fa" "${ARGS[@]}" "$@" \
    --dev none >"$WORK/cpu.out" 2>"$WORK/cpu.err" || rc=$?
  if ((rc)); then
    echo "FAIL $name: CPU reference run failed (exit $rc)"; tail -n 5 "$WORK/cpu.err" | sed 's/^/    /'
    fail=$((fail + 1)); return
  fi
  t1=$(date +%s.%N)
  rc=0
  GGML_BACKEND_PATH="$POLYCL_LIB" timeout "$TIMEOUT" "$GREEDY" -m "$model" --fa "$fa" "${ARGS[@]}" "$@" \
    --dev "$DEV" >"$WORK/dev.out" 2>"$WORK/dev.err" || rc=$?
  if ((rc)); then
    echo "FAIL $name: $DEV run failed (exit $rc$( ((rc == 124)) && echo ", timed out after ${TIMEOUT}s"))"
    tail -n 10 "$WORK/dev.err" | sed 's/^/    /'
    fail=$((fail + 1)); return
  fi
  t2=$(date +%s.%N)
  ref=$(field tokens "$WORK/cpu.out")
  got=$(field tokens "$WORK/dev.out")
  times=$(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "cpu %.1fs, %s %.1fs", b - a, "'"$DEV"'", c - b }')
  if [[ -n "$ref" && "$ref" == "$got" ]]; then
    echo "PASS $name ($times; CPU margin $(field margin "$WORK/cpu.out"))"
    pass=$((pass + 1))
  else
    echo "FAIL $name ($times)"
    echo "    cpu:    $ref"
    echo "    $DEV: $got"
    echo "    $(explain "$ref" "$got" "$(field margins "$WORK/cpu.out")")"
    fail=$((fail + 1))
  fi
}

for q in "${MODELS[@]}"; do
  model="$MDIR/model-$q.gguf"
  [[ -f "$model" ]] || die "no model $model"
  for fa in off on; do
    check "$q fa=$fa" "$model" "$fa"
  done
done
# Quantized KV caches (llama's -ctk / -ctv), K and V alike, with the first model: polycl
# writes their rows (SET_ROWS into Q8_0 / Q4_0 blocks); without that llama aborted at context
# creation. Each type of GREEDY_CACHES.
for c in ${GREEDY_CACHES-q8_0 q4_0}; do
  check "${MODELS[0]} fa=on cache=$c" "$MDIR/model-${MODELS[0]}.gguf" on --ctk "$c" --ctv "$c"
done
echo "greedy: $pass passed, $fail failed"
[[ $fail == 0 ]]
