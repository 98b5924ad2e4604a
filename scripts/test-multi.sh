#!/usr/bin/env bash
# Several devices at once, on two OpenCL devices (PoCL: POCL_DEVICES="pthread pthread"):
#   1. cargo tests tests/multi_*.rs: row-split matmuls equal one device bit for bit, the Q8_1
#      cache's exact counts, a device failing mid-compute, bad ratios, all-reduce, async copies
#      (skipped with MULTI_SKIP_CARGO=1: scripts/test.sh has run them already);
#   2. greedy tokens through llama.cpp equal the CPU backend's for -sm layer, -sm row -ts 1/1,
#      -sm row -ts 3/1 (flash attention off and on) and -sm tensor (flash attention on, which it
#      needs), on the Q4_0 and Q8_0 models: 40 prompt tokens in batches of 16, 32 generated;
#   3. the Q8_1 activation cache on (POLYCL_Q8_CACHE=1) and off (0) give bit-identical logits;
#   4. one decode step of the L-layer model (a 1-token prompt) reports, summed over the devices,
#      hits = 3L (Q, K, V share a quantization; gate and up share one) and misses = 4L, plus one
#      when the output matrix also takes Q8_1 activations (Q8_0 model), on the main devices and
#      on the peers; the quantize kernels and peer copies the executor counted are fewer with
#      the cache on by exactly the hits;
#   5. bad -ts ratios print polycl's error; a device failing mid-compute (POLYCL_FAULT=queue@N)
#      makes llama_decode fail, within the timeout (no hang).
#
# Environment: POLYCL_LIB (default target/release/libggml-polycl.so), MULTI_TIMEOUT (s per run,
# default 300), MULTI_MODELS (default "Q4_0 Q8_0"), MULTI_SKIP_CARGO.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TIMEOUT=${MULTI_TIMEOUT:-300}
read -r -a MODELS <<<"${MULTI_MODELS:-Q4_0 Q8_0}"
export POCL_DEVICES="pthread pthread"
DEVS=POLYCL0/POLYCL1
ARGS=(--prompt-tokens 40 -b 16 -n 32 -t 1)

pass=0
fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

if [[ -z "${MULTI_SKIP_CARGO:-}" ]]; then
  stage "multi-device cargo tests"
  (cd "$POLYCL_ROOT" && timeout "$TIMEOUT" cargo test --release --test multi_split --test multi_comm)
fi

require_plugin
ensure_host
GREEDY=$(build_greedy)
MDIR=$(bash "$POLYCL_ROOT/scripts/models.sh" | tail -n 1)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ensure_gguf

field() { sed -n "s/^$1: *//p" "$2"; }

# The device list must offer two polycl devices, or nothing here means anything.
n_polycl=$(GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" --list-devices 2>/dev/null | grep -c '^POLYCL' || true)
((n_polycl >= 2)) || die "need two polycl devices (POCL_DEVICES=\"$POCL_DEVICES\"), found $n_polycl"

# cpu NAME FA: the CPU reference tokens into $WORK/NAME.cpu
cpu() {
  env -u GGML_BACKEND_PATH timeout "$TIMEOUT" "$GREEDY" -m "$1" --fa "$2" "${ARGS[@]}" --dev none \
    >"$WORK/cpu.out" 2>"$WORK/cpu.err" || { tail -n 5 "$WORK/cpu.err"; die "CPU reference run failed"; }
  field tokens "$WORK/cpu.out"
}

# polycl OUT ERR ARGS...: one run through polycl; returns greedy's status.
polycl() {
  local out=$1 err=$2
  shift 2
  GGML_BACKEND_PATH="$POLYCL_LIB" timeout "$TIMEOUT" "$GREEDY" "$@" >"$out" 2>"$err"
}

stage "greedy tokens: split modes vs the CPU backend"
for q in "${MODELS[@]}"; do
  model="$MDIR/model-$q.gguf"
  [[ -f "$model" ]] || die "no model $model"
  for fa in off on; do
    ref=$(cpu "$model" "$fa")
    for mode in "layer" "row 1/1" "row 3/1" "tensor"; do
      [[ $mode == tensor && $fa == off ]] && continue
      read -r sm ts <<<"$mode"
      name="$q -sm $sm${ts:+ -ts $ts} fa=$fa"
      rc=0
      polycl "$WORK/dev.out" "$WORK/dev.err" -m "$model" --fa "$fa" "${ARGS[@]}" --dev "$DEVS" \
        --sm "$sm" ${ts:+--ts "$ts"} || rc=$?
      got=$(field tokens "$WORK/dev.out")
      if ((rc)); then
        bad "$name: exit $rc"; tail -n 8 "$WORK/dev.err" | sed 's/^/    /'
      elif [[ -n "$ref" && "$got" == "$ref" ]]; then
        ok "$name ($(field speed "$WORK/dev.out"))"
      else
        bad "$name"; echo "    cpu:    $ref"; echo "    polycl: $got"
      fi
    done
  done
done

stage "-sm tensor: the all-reduce runs on the devices"
model="$MDIR/model-${MODELS[0]}.gguf"
POLYCL_LOG=1 polycl "$WORK/t.out" "$WORK/t.err" -m "$model" "${ARGS[@]}" --fa on --dev "$DEVS" \
  --sm tensor -v || { tail -n 5 "$WORK/t.err"; die "run failed"; }
if grep -q "all-reduce over POLYCL0, POLYCL1 with OpenCL events" "$WORK/t.err" &&
  ! grep -q "all-reduce: declined" "$WORK/t.err"; then
  ok "-sm tensor: ggml_backend_comm_* served every all-reduce (no host fallback)"
else
  bad "-sm tensor: the meta backend fell back to its own all-reduce"
fi

stage "Q8_1 cache on vs off: bit-identical logits"
for q in "${MODELS[@]}"; do
  model="$MDIR/model-$q.gguf"
  for devs in POLYCL0 "$DEVS --sm row --ts 1/1"; do
    read -r -a D <<<"$devs"
    for c in 0 1; do
      POLYCL_Q8_CACHE=$c polycl "$WORK/c$c.out" "$WORK/c$c.err" -m "$model" "${ARGS[@]}" \
        --dev "${D[@]}" --logits "$WORK/logits$c.bin" || { tail -n 5 "$WORK/c$c.err"; die "run failed"; }
    done
    if [[ -s "$WORK/logits0.bin" ]] && cmp -s "$WORK/logits0.bin" "$WORK/logits1.bin"; then
      ok "$q --dev $devs: logits of 32 steps identical ($(stat -c %s "$WORK/logits1.bin") bytes)"
    else
      bad "$q --dev $devs: logits differ with the cache on"
    fi
  done
done

stage "Q8_1 cache counters: one decode step"
# sums "q8_1 cache" lines: hits misses peer_hits peer_misses quantize copies
sum_cache() {
  sed -n 's/.*q8_1 cache: \([0-9]*\) hits, \([0-9]*\) misses; peers: \([0-9]*\) hits, \([0-9]*\) misses; \([0-9]*\) quantize kernels, \([0-9]*\) peer copies.*/\1 \2 \3 \4 \5 \6/p' "$1" |
    awk '{for (i = 1; i <= 6; i++) s[i] += $i} END {printf "%d %d %d %d %d %d\n", s[1], s[2], s[3], s[4], s[5], s[6]}'
}
# sums the executor's counts without the cache: quantize copies
sum_plain() {
  sed -n 's/.*graph compute: \([0-9]*\) quantize kernels, \([0-9]*\) peer copies.*/\1 \2/p' "$1" |
    awk '{q += $1; c += $2} END {printf "%d %d\n", q, c}'
}
STEP=(--prompt-tokens 1 -n 1 -t 1 -v)
for q in "${MODELS[@]}"; do
  model="$MDIR/model-$q.gguf"
  # L, and whether the output matrix takes Q8_1 activations (Q4_0/Q8_0 weights).
  read -r L out < <(python3 - "$model" <<'EOF'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
f = r.fields["llama.block_count"]
L = int(f.parts[f.data[0]][0])
t = {x.name: x.tensor_type.name for x in r.tensors}
print(L, 1 if t.get("output.weight", t.get("token_embd.weight")) in ("Q4_0", "Q8_0") else 0)
EOF
  )
  hits=$((3 * L)) misses=$((4 * L + out))
  for devs in POLYCL0 "$DEVS --sm row --ts 1/1"; do
    read -r -a D <<<"$devs"
    POLYCL_Q8_CACHE=2 POLYCL_LOG=1 polycl "$WORK/on.out" "$WORK/on.err" -m "$model" "${STEP[@]}" \
      --dev "${D[@]}" || { tail -n 5 "$WORK/on.err"; die "run failed"; }
    POLYCL_Q8_CACHE=0 POLYCL_LOG=1 polycl "$WORK/off.out" "$WORK/off.err" -m "$model" "${STEP[@]}" \
      --dev "${D[@]}" || { tail -n 5 "$WORK/off.err"; die "run failed"; }
    read -r h m ph pm qon con < <(sum_cache "$WORK/on.err")
    read -r qoff coff < <(sum_plain "$WORK/off.err")
    name="$q --dev $devs (L=$L): hits $h misses $m, peers $ph/$pm, quantize $qoff -> $qon, peer copies $coff -> $con"
    if [[ ${#D[@]} == 1 ]]; then want_peer="0 0"; else want_peer="$hits $misses"; fi
    if [[ "$h $m" == "$hits $misses" && "$ph $pm" == "$want_peer" ]] &&
      ((qon == qoff - hits && qon < qoff && con == coff - ph)) &&
      { [[ ${#D[@]} == 1 ]] || ((con < coff)); }; then
      ok "$name"
    else
      bad "$name; want hits $hits misses $misses, peers $want_peer"
    fi
  done
done

stage "bad input and a failing device"
model="$MDIR/model-${MODELS[0]}.gguf"
for ts in -1/1 nan/1 1/1/1; do
  polycl "$WORK/b.out" "$WORK/b.err" -m "$model" "${ARGS[@]}" --dev "$DEVS" --sm row --ts "$ts" || true
  if grep -q "ggml_backend_split_buffer_type: invalid argument" "$WORK/b.err"; then
    ok "-ts $ts: $(grep -m1 -o 'invalid argument: .*' "$WORK/b.err")"
  else
    bad "-ts $ts: no error from polycl"; tail -n 5 "$WORK/b.err" | sed 's/^/    /'
  fi
done
for n in 5 150 1200; do
  rc=0
  POLYCL_FAULT=queue@$n polycl "$WORK/f.out" "$WORK/f.err" -m "$model" "${ARGS[@]}" --dev "$DEVS" \
    --sm row --ts 1/1 || rc=$?
  if ((rc != 0 && rc != 124)) && grep -q "llama_decode failed" "$WORK/f.err"; then
    ok "fault at queue operation $n: $(grep -m1 -o 'llama_decode failed.*' "$WORK/f.err") (exit $rc)"
  else
    bad "fault at queue operation $n: exit $rc (124: hung)"; tail -n 5 "$WORK/f.err" | sed 's/^/    /'
  fi
done

echo "multi: $pass passed, $fail failed"
[[ $fail == 0 ]]
