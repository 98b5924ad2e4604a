#!/usr/bin/env bash
# llama-bench prompt processing (pp) and generation (tg) on the test models, through polycl
# and through llama.cpp's CPU backend, with the ratio polycl/CPU.
#
#   polycl: GGML_BACKEND_PATH=$POLYCL_LIB llama-bench -dev POLYCL0 -ngl 99
#   CPU:    (no GGML_BACKEND_PATH)        llama-bench -dev none -ngl 0
# At this llama.cpp version -dev takes device names (case-insensitive), "none" means no
# offload device, and CPU-type devices are rejected; -o jsonl prints one object per test.
#
# Environment: POLYCL_LIB, BENCH_DEV (POLYCL0), BENCH_MODELS ("Q4_0"; any of F16 Q8_0 Q4_0
# Q4_K_M), BENCH_ARGS ("-p 64 -n 32 -r 2"), BENCH_FA (auto|on|off, default auto).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DEV=${BENCH_DEV:-POLYCL0}
read -r -a MODELS <<<"${BENCH_MODELS:-Q4_0}"
read -r -a BARGS <<<"${BENCH_ARGS:--p 64 -n 32 -r 2}"
FA=${BENCH_FA:-auto}

require_plugin
ensure_host
MDIR=$(bash "$POLYCL_ROOT/scripts/models.sh" | tail -n 1)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

bench() { # out-file label env-args... -- llama-bench args...
  local out=$1 label=$2; shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  if ! env "${envs[@]}" "$HOST_BIN/llama-bench" "$@" -fa "$FA" "${BARGS[@]}" -o jsonl \
      >"$out" 2>"$out.err"; then
    echo "bench: llama-bench ($label) failed:" >&2
    tail -n 15 "$out.err" >&2
    exit 1
  fi
}

for q in "${MODELS[@]}"; do
  model="$MDIR/model-$q.gguf"
  [[ -f "$model" ]] || die "no model $model"
  log "$q: CPU backend"
  bench "$WORK/cpu-$q.jsonl" "CPU $q" -u GGML_BACKEND_PATH -- -m "$model" -dev none -ngl 0
  log "$q: polycl $DEV"
  bench "$WORK/dev-$q.jsonl" "$DEV $q" GGML_BACKEND_PATH="$POLYCL_LIB" -- -m "$model" -dev "$DEV" -ngl 99
done

python3 - "$WORK" "$DEV" "${MODELS[@]}" <<'EOF'
import json, sys
work, dev, models = sys.argv[1], sys.argv[2], sys.argv[3:]

def load(path):
    rows = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
            rows[test] = r
    return rows

print(f"{'model':8} {'test':6} {'CPU tok/s':>12} {dev + ' tok/s':>14} {'ratio':>7}   (polycl / CPU)")
for q in models:
    cpu, pcl = load(f"{work}/cpu-{q}.jsonl"), load(f"{work}/dev-{q}.jsonl")
    for test in cpu:
        c = cpu[test]["avg_ts"]
        p = pcl.get(test, {}).get("avg_ts", float("nan"))
        print(f"{q:8} {test:6} {c:12.2f} {p:14.2f} {p / c:7.3f}")
r = next(iter(load(f"{work}/dev-{models[0]}.jsonl").values()), {})
print(f"# {dev}: backends={r.get('backends')} gpu_info={r.get('gpu_info')} "
      f"flash_attn={r.get('flash_attn')} threads={r.get('n_threads')}")
EOF
