#!/usr/bin/env bash
# Multi-device throughput in one run: llama-bench prompt processing (pp) and generation (tg)
# through polycl for one device against two, every split mode (layer, row, tensor) with its
# tensor-split ratios, each with the Q8_1 activation cache off and on (POLYCL_Q8_CACHE=0/1).
# Prints one table (tokens/s, mean of the repetitions) and writes the raw jsonl next to it.
#
# On this repository's CI machine the two devices are PoCL CPU devices on the same cores
# (POCL_DEVICES="pthread pthread"): two devices cannot beat one there, and the numbers measure
# the overhead of splitting. Run it on a machine with two GPUs for real scaling (set
# BENCH_DEVICES to their polycl names, and leave POCL_DEVICES alone).
#
# Environment: POLYCL_LIB, BENCH_MODEL (default the Q4_0 test model), BENCH_DEVICES (default
# POLYCL0/POLYCL1), BENCH_PP (default 128), BENCH_TG (default 64), BENCH_REPS (default 5),
# BENCH_OUT (jsonl file, default a temporary one).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

require_plugin
ensure_host
export POCL_DEVICES=${POCL_DEVICES:-pthread pthread}
MODEL=${BENCH_MODEL:-$(bash "$POLYCL_ROOT/scripts/models.sh" | tail -n 1)/model-Q4_0.gguf}
DEVS=${BENCH_DEVICES:-POLYCL0/POLYCL1}
ONE=${DEVS%%/*}
PP=${BENCH_PP:-128}
TG=${BENCH_TG:-64}
REPS=${BENCH_REPS:-5}
OUT=${BENCH_OUT:-$(mktemp --suffix=.jsonl)}
: >"$OUT"

# label | llama-bench device arguments (flash attention on everywhere: -sm tensor needs it)
CONFIGS=(
  "one device|-dev $ONE -sm none"
  "layer|-dev $DEVS -sm layer -ts 1/1"
  "row|-dev $DEVS -sm row -ts 1/1"
  "row|-dev $DEVS -sm row -ts 3/1"
  "tensor|-dev $DEVS -sm tensor -ts 1/1"
)

log "model $MODEL, devices $DEVS, pp$PP tg$TG, $REPS repetitions, POCL_DEVICES=\"$POCL_DEVICES\""
for cfg in "${CONFIGS[@]}"; do
  label=${cfg%%|*}
  read -r -a args <<<"${cfg#*|}"
  for cache in 0 1; do
    log "$label ${args[*]} POLYCL_Q8_CACHE=$cache"
    if ! POLYCL_Q8_CACHE=$cache GGML_BACKEND_PATH="$POLYCL_LIB" "$HOST_BIN/llama-bench" \
      -m "$MODEL" -p "$PP" -n "$TG" -r "$REPS" -fa 1 "${args[@]}" -o jsonl 2>"$OUT.err" |
      sed "s/^{/{\"label\": \"$label\", \"q8_cache\": $cache, /" >>"$OUT"; then
      tail -n 5 "$OUT.err" >&2
      die "llama-bench failed for $label ${args[*]}"
    fi
  done
done
rm -f "$OUT.err"

python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
table = {}
for r in rows:
    key = (r["label"], r["devices"], r["tensor_split"] if r["split_mode"] != "none" else "-")
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    table.setdefault(key, {})[(test, r["q8_cache"])] = (r["avg_ts"], r["stddev_ts"])
tests = sorted({t for v in table.values() for (t, _) in v}, key=lambda t: (t[:2] != "pp", t))
head = ["split", "devices", "ratios"] + [f"{t} cache {'on' if c else 'off'}" for t in tests for c in (0, 1)]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for (label, devs, ts), v in table.items():
    cells = [label, devs, ts]
    for t in tests:
        for c in (0, 1):
            m = v.get((t, c))
            cells.append(f"{m[0]:.1f} ± {m[1]:.1f}" if m else "-")
    print("| " + " | ".join(cells) + " |")
print(f"\n(tokens/s; raw llama-bench jsonl: {sys.argv[1]})")
EOF
