#!/usr/bin/env bash
# Makes the random-weight test models once and prints their folder (last line of stdout):
#   $POLYCL_CACHE/models-<hash of make-model.py>/model-{F16,Q8_0,Q4_0,Q4_K_M}.gguf
# F16 comes from scripts/make-model.py, the others from the host's llama-quantize.
# Idempotent: an existing complete folder is reused.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

QUANTS=(Q8_0 Q4_0 Q4_K_M)
DIR=$(models_dir)
if [[ -f "$DIR/.complete" ]]; then echo "$DIR"; exit 0; fi

ensure_host
ensure_gguf
TMP="$DIR.tmp.$$"
rm -rf "$TMP"; mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
log "making $DIR"
python3 "$POLYCL_ROOT/scripts/make-model.py" "$TMP/model-F16.gguf"
for q in "${QUANTS[@]}"; do
  if ! "$HOST_BIN/llama-quantize" "$TMP/model-F16.gguf" "$TMP/model-$q.gguf" "$q" >"$TMP/quantize-$q.log" 2>&1; then
    tail -n 20 "$TMP/quantize-$q.log" >&2
    die "llama-quantize $q failed"
  fi
done
rm -f "$TMP"/quantize-*.log
touch "$TMP/.complete"
# Another run may have finished first; keep whichever complete folder landed.
[[ -f "$DIR/.complete" ]] || rm -rf "$DIR"
mv -T "$TMP" "$DIR" 2>/dev/null || true
[[ -f "$DIR/.complete" ]] || die "could not create $DIR"
ls -l "$DIR" >&2
echo "$DIR"
