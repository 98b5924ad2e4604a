#!/usr/bin/env bash
# Launch budget of a decode step (issue 5): with the fast kernels and fusions (the plan a GPU
# gets; POLYCL_FAST_KERNELS=1 makes PoCL build it too), one generated token of a random llama
# model must launch at most MAX_PER_LAYER kernels per transformer layer plus at most
# MAX_CONSTANT for everything else. The per-layer figure is measured, not assumed: the same
# model shape with 2 and 6 layers, (launches(6) - launches(2)) / 4.
# Counts come from polycl's "graph compute: N launches" log lines (POLYCL_LOG=1), last decode
# step. Flash attention on is asserted (llama's default picks it on polycl); off is reported.
# Issue 5's budget is 8 a layer; the defaults are what the plan takes today (5 a layer + 2:
# the O and down projections take the residual add and the next norm, kernel_mul_mv_norm_*,
# all but the first layer's; the output norm's is applied by the lm head, which also writes
# the normed row for the host, kernel_mul_mv_normed_*; the last layer's selection of its one
# output row is a view, passes/fuse/row_select.rs), so a change that adds decode launches
# fails here. With the attention of a short cache and the O projection in one launch by heads
# (POLYCL_ATTN_OH=1, kernel_attn_oh_*) or by ticket (POLYCL_ATTN_O=1, plan/attn_o.rs) it must
# be 4 a layer + 2; without matmul_norm (POLYCL_FUSE_SKIP=matmul_norm, which also turns
# row_select off) 7 a layer + 4.
# With q8_0 and q4_0 caches it must be 6 a layer + 3 (the ropes, llama's Hadamard rotations and
# the cache writes in one launch; the output's rotation in the attention's merge, but for one
# layer at most, whose rotated output the host's allocator put over the mask).
# It also asserts which decode kernels the fa-on step runs: the warp-cooperative attention
# (kernel_fa_vec, or kernel_fa_one where one group a head takes a short cache), the Q/K/V
# projections with rope and cache writes in their epilogue
# (kernel_mul_mv_group_rope_q4_0), the matvec + norm (kernel_mul_mv_norm_q4_0) and the norm
# spread over several work-groups (kernel_fused_rms_norm_wide),
# which needs the allocator to keep a residual add's inputs alive (backend/optimize.rs); the
# in-place fallback kernel_fused_rms_norm must not appear.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MAX_PER_LAYER=${MAX_PER_LAYER:-5}
MAX_CONSTANT=${MAX_CONSTANT:-2}

require_plugin
ensure_host
GREEDY=$(build_greedy)
key=$(sha256sum "$POLYCL_ROOT/scripts/make-model-raw.py" | cut -c1-12)
MDIR="$POLYCL_CACHE/launch-models-$key"
mkdir -p "$MDIR"
raw_model() { # FILE ARG...: make-model-raw.py's model with ARGs, made where missing, under its
  # name only once complete
  [[ -f "$1" ]] || python3 "$POLYCL_ROOT/scripts/make-model-raw.py" "$1.tmp" "${@:2}" >/dev/null
  [[ -f "$1" ]] || mv -f "$1.tmp" "$1"
}
for l in 2 6; do
  raw_model "$MDIR/tiny-q4_0-$l.gguf" --preset tiny --type q4_0 --layers "$l"
done

# The matvec + norm kernels on rows as wide as the 1B's (64 shares a row) over six layers of
# a growing residual: the decode tokens must equal the CPU backend's, with no NaN (without
# its factor c, the norm's Q8_1 copy overflowed half's range: NaN logits here and on the 1B).
WIDE="$MDIR/wide-q4_0.gguf"
raw_model "$WIDE" --preset wide --type q4_0

# Launches of the last graph compute of a short generation; the kernel names of the last
# plan built (the decode step's) go to $KERNELS.
KERNELS=$(mktemp)
trap 'rm -f "$KERNELS"' EXIT
launches() {
  local out
  out=$(POLYCL_LOG=1 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" \
    -m "$MDIR/tiny-q4_0-$1.gguf" --fa "$2" --prompt-tokens 8 -b 16 -n 4 -t 1 --dev POLYCL0 -v \
    ${CACHE_ARGS:-} 2>&1) ||
    { echo "$out" | tail -n 20 >&2; die "generation with $1 layers, fa $2 failed"; }
  echo "$out" | sed -n 's/.*: launches: //p' | tail -n 1 >"$KERNELS"
  echo "$out" | sed -n 's/.*graph compute: \([0-9]*\) launches.*/\1/p' | tail -n 1
}

fail=0
for fa in on off; do
  n2=$(launches 2 "$fa")
  n6=$(launches 6 "$fa")
  if [[ $fa == on ]]; then
    for k in 'kernel_fa_(vec|one)(_d128|_d64)?' kernel_mul_mv_group_rope_q4_0 kernel_mul_mv_norm_q4_0 \
      kernel_fused_rms_norm_wide kernel_mul_mv_normed_q4_0; do
      grep -qwE "$k" "$KERNELS" || { echo "FAIL: decode step (fa on) does not run $k"; fail=1; }
    done
    if grep -qw kernel_fused_rms_norm "$KERNELS"; then
      echo "FAIL: decode step (fa on) runs the in-place norm kernel_fused_rms_norm"; fail=1
    fi
  fi
  [[ -n "$n2" && -n "$n6" ]] || die "no launch counts logged (fa $fa)"
  per=$(( (n6 - n2) / 4 ))
  const=$(( n2 - 2 * per ))
  echo "fa $fa: decode step launches: 2 layers $n2, 6 layers $n6 -> $per per layer + $const"
  if [[ $fa == on ]] && (( (n6 - n2) % 4 != 0 || per > MAX_PER_LAYER || const > MAX_CONSTANT )); then
    echo "FAIL: more than $MAX_PER_LAYER launches per layer + $MAX_CONSTANT (fa $fa)"
    fail=1
  fi
done
# The attention and O projection by heads: one launch a layer fewer, and no attention launch of
# its own.
n2=$(POLYCL_ATTN_OH=1 launches 2 on)
n6=$(POLYCL_ATTN_OH=1 launches 6 on)
grep -qwE 'kernel_attn_oh_q4_0_d(128|64)' "$KERNELS" || { echo "FAIL: POLYCL_ATTN_OH=1 runs no kernel_attn_oh_q4_0_*"; fail=1; }
if grep -q kernel_fa_ "$KERNELS"; then echo "FAIL: POLYCL_ATTN_OH=1 runs an attention launch of its own"; fail=1; fi
echo "POLYCL_ATTN_OH=1, fa on: decode step launches: 2 layers $n2, 6 layers $n6"
if [[ -z "$n2" || -z "$n6" ]] || (( (n6 - n2) != 16 || n2 > 10 )); then
  echo "FAIL: with POLYCL_ATTN_OH=1, not 4 launches per layer + 2"; fail=1
fi
# The attention and O projection pair: one launch a layer fewer, and neither the attention nor
# the O projection's matvec + norm in a launch of its own.
n2=$(POLYCL_ATTN_O=1 launches 2 on)
n6=$(POLYCL_ATTN_O=1 launches 6 on)
grep -qwE 'kernel_attn_o_q4_0_d(128|64)' "$KERNELS" || { echo "FAIL: POLYCL_ATTN_O=1 runs no kernel_attn_o_q4_0_*"; fail=1; }
if grep -qE 'kernel_fa_(short|vec)' "$KERNELS"; then echo "FAIL: POLYCL_ATTN_O=1 runs an attention launch of its own"; fail=1; fi
echo "POLYCL_ATTN_O=1, fa on: decode step launches: 2 layers $n2, 6 layers $n6"
if [[ -z "$n2" || -z "$n6" ]] || (( (n6 - n2) != 16 || n2 > 10 )); then
  echo "FAIL: with POLYCL_ATTN_O=1, not 4 launches per layer + 2"; fail=1
fi
# Quantized KV caches: llama rotates q, k and v by the Hadamard matrix before the cache writes
# and the attention's output after it; the ropes, the three rotations and both cache writes
# are one launch (kernel_rope_rot_store_f32, passes/fuse/rope_rot_store.rs), the attention
# reads the quantized blocks (kernel_fa_long_q8_*, kernel_fa_long_q4_*), no F16 copies, and
# rotates its output in its merge, where it writes the O projection's Q8_1 activation
# (passes/fuse/fa_rotation.rs): 6 a layer + 3. The tiny model's last layer keeps its rotation
# launch (kernel_hadamard_f32): the allocator put the rotated output over the mask, which other
# heads' work-groups still read when a row's merge writes, so the pass leaves it apart.
for c in q8_0 q4_0; do
  per=6
  n2=$(CACHE_ARGS="--ctk $c --ctv $c" launches 2 on)
  n6=$(CACHE_ARGS="--ctk $c --ctv $c" launches 6 on)
  grep -qw kernel_rope_rot_store_f32 "$KERNELS" || { echo "FAIL: $c cache runs no kernel_rope_rot_store_f32"; fail=1; }
  if grep -qE 'kernel_(rope_norm|set_rows|cpy)_' "$KERNELS"; then
    echo "FAIL: $c cache runs a rope, cache write or copy of its own"; fail=1
  fi
  rotations=$(grep -ow kernel_hadamard_f32 "$KERNELS" | wc -l)
  echo "$c cache, fa on: decode step launches: 2 layers $n2, 6 layers $n6; rotation launches $rotations"
  if [[ -z "$n2" || -z "$n6" ]] || (( (n6 - n2) != 4 * per || n2 > 2 * per + 3 || rotations > 1 )); then
    echo "FAIL: with a $c cache, not $per launches per layer + 3, the output's rotation in the attention"; fail=1
  fi
done
# Without matmul_norm: a norm kernel a sublayer again, and no matvec + norm kernel.
n2=$(POLYCL_FUSE_SKIP=matmul_norm launches 2 on)
n6=$(POLYCL_FUSE_SKIP=matmul_norm launches 6 on)
if grep -qw kernel_mul_mv_norm_q4_0 "$KERNELS"; then
  echo "FAIL: POLYCL_FUSE_SKIP=matmul_norm runs kernel_mul_mv_norm_q4_0"; fail=1
fi
echo "without matmul_norm, fa on: decode step launches: 2 layers $n2, 6 layers $n6"
if [[ -z "$n2" || -z "$n6" ]] || (( (n6 - n2) != 28 || n2 > 18 )); then
  echo "FAIL: without matmul_norm, not 7 launches per layer + 4"; fail=1
fi
# K-quant weights (the greedy test's Q4_K_M model keeps some V and down
# projections in Q6_K): the same fused kernels, on Q8_1 activations that the
# norm, GLU and attention kernels write, so no quantize launch is left.
QKM="$(bash "$POLYCL_ROOT/scripts/models.sh" | tail -n 1)/model-Q4_K_M.gguf"
out=$(POLYCL_LOG=1 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" -m "$QKM" --fa on \
  --prompt-tokens 8 -b 16 -n 4 -t 1 --dev POLYCL0 -v 2>&1) || { echo "$out" | tail -n 20 >&2; die "Q4_K_M generation failed"; }
kq=$(echo "$out" | sed -n 's/.*: launches: //p' | tail -n 1)
echo "Q4_K_M, fa on: decode step: $kq"
for k in kernel_mul_mv_glu_q4_k 'kernel_fa_(vec|one)(_d128|_d64)?' kernel_mul_mv_norm_q4_k kernel_fused_rms_norm_wide; do
  grep -qwE "$k" <<<"$kq" || { echo "FAIL: Q4_K_M decode step (fa on) does not run $k"; fail=1; }
done
grep -qE 'kernel_mul_mv_group_rope_(q4_k|mixed)' <<<"$kq" ||
  { echo "FAIL: Q4_K_M decode step (fa on) runs no group+rope kernel"; fail=1; }
if grep -q kernel_quantize <<<"$kq"; then
  echo "FAIL: Q4_K_M decode step (fa on) quantizes activations in a launch of its own"; fail=1
fi

wide_cpu=$("$GREEDY" -m "$WIDE" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev none 2>&1 | grep '^tokens:') ||
  die "CPU generation with the wide model failed"
out=$(POLYCL_LOG=1 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" -m "$WIDE" --fa on \
  --prompt-tokens 8 -b 16 -n 8 -t 1 --dev POLYCL0 -v 2>&1) || { echo "$out" | grep -v launches | tail -n 3 || true; }
wide=$(echo "$out" | grep '^tokens:' || true)
echo "wide model (n_embd 2048), fa on: CPU $wide_cpu; polycl $wide"
grep -qw kernel_mul_mv_norm_q4_0 <<<"$out" || { echo "FAIL: the wide model runs no kernel_mul_mv_norm_q4_0"; fail=1; }
[[ -n "$wide" && "$wide" == "$wide_cpu" ]] || { echo "FAIL: the wide model's tokens differ from the CPU backend's"; fail=1; }
# check_setting LABEL MODEL WANT VAR=value... [-- KERNEL...]: with the settings (and the fast
# kernels, fa on, 8 tokens after 8), the model's greedy tokens equal WANT (the CPU backend's, or
# polycl's own for a setting that must keep the default's sums) and each KERNEL launches.
polycl_run() { # MODEL VAR=value...: check_setting's generation, its whole log (-v, POLYCL_LOG)
  local model=$1
  shift
  env "$@" POLYCL_LOG=1 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" \
    -m "$model" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev POLYCL0 -v 2>&1
}
check_setting() {
  local label=$1 model=$2 want=$3 out got k vars=()
  shift 3
  while (($#)) && [[ $1 != -- ]]; do vars+=("$1"); shift; done
  (($#)) && shift
  out=$(polycl_run "$model" "${vars[@]}") || { echo "$out" | grep -v launches | tail -n 3 || true; }
  got=$(echo "$out" | grep '^tokens:' || true)
  echo "$label, ${vars[*]}: want $want; polycl $got"
  for k in "$@"; do
    grep -qw "$k" <<<"$out" || { echo "FAIL: ${vars[*]} runs no $k on the $label"; fail=1; }
  done
  [[ -n "$got" && "$got" == "$want" ]] ||
    { echo "FAIL: the $label's tokens with ${vars[*]} differ from the wanted ones"; fail=1; }
}
Q40="$(bash "$POLYCL_ROOT/scripts/models.sh" | tail -n 1)/model-Q4_0.gguf"
Q80="$(dirname "$Q40")/model-Q8_0.gguf"
q40_cpu=$("$GREEDY" -m "$Q40" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev none 2>&1 | grep '^tokens:') ||
  die "CPU generation with the Q4_0 model failed"
q80_cpu=$("$GREEDY" -m "$Q80" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev none 2>&1 | grep '^tokens:') ||
  die "CPU generation with the Q8_0 model failed"
qkm_cpu=$("$GREEDY" -m "$QKM" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev none 2>&1 | grep '^tokens:') ||
  die "CPU generation with the Q4_K_M model failed"
# MulMatAddNorm two warps a row pair: kernel_mul_mv_norm2_q4_0, which NVIDIA gets by shape where
# the kernel has at most half as many work-groups as compute units, and kernel_mul_mv_norm2_q8_0,
# which only the setting takes so far (on the Q8_0 model, with the second warp's share of each
# pair's first row 30% off, the tokens changed; 5% off, they did not).
check_setting "wide model" "$WIDE" "$wide_cpu" POLYCL_MVN_SPLIT=2 -- kernel_mul_mv_norm2_q4_0
check_setting "Q8_0 model" "$Q80" "$q80_cpu" POLYCL_MVN_SPLIT=2 -- kernel_mul_mv_norm2_q8_0
# The wide model's tokens are one token repeated (make-model-raw.py: its residual is one bias
# direction), so a setting that must keep the default's sums bit for bit (the serial hand-off)
# runs on the centered wide model too, against polycl's own tokens by default: a random network
# whose tokens part at the first rounding that differs (the CPU backend's own, fa on against
# off, part within 8 tokens; a matvec's pair sums made 5e-7 too large, a temporary edit,
# changed the 8th token here, and none of the wide model's).
WIDEC="$MDIR/wide-centered-q4_0.gguf"
raw_model "$WIDEC" --preset wide --type q4_0 --centered
widec=$(polycl_run "$WIDEC" | grep '^tokens:' || true)
[[ -n $widec && $(wc -w <<<"$widec") -eq 9 ]] || { echo "FAIL: no tokens from the centered wide model"; fail=1; }
check_setting "centered wide model" "$WIDEC" "$widec" POLYCL_HANDOFF=serial
# The hand-off (runtime/handoff.rs) in its serial form, the counters on the one queue: the
# decode step's kernels chained (the log's "hand-off (Serial): N of M launches in C chains"),
# every wait satisfied (a wait that gave up fails the compute) and the same tokens as the CPU
# backend's.
serial_run() { # MODEL [greedy args]: "chained launches chains|tokens" of the last decode step
  local model=$1 out
  shift
  out=$(POLYCL_HANDOFF=serial POLYCL_LOG=1 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" \
    -m "$model" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev POLYCL0 -v "$@" 2>&1) ||
    { echo "$out" | grep -v launches | tail -n 3 >&2 || true; }
  echo "$(echo "$out" | sed -n 's/.*hand-off (Serial): \([0-9]*\) of \([0-9]*\) launches in \([0-9]*\) chains.*/\1 \2 \3/p' |
    tail -n 1)|$(echo "$out" | grep '^tokens:' || true)"
}
IFS='|' read -r chained handoff <<<"$(serial_run "$WIDE")"
echo "wide model, POLYCL_HANDOFF=serial: decode step chained/launches/chains: ${chained:-none}; polycl $handoff"
read -r n_chained n_all _ <<<"${chained:-0 0 0}"
(( n_chained >= 3 && n_chained + 3 >= n_all )) ||
  { echo "FAIL: POLYCL_HANDOFF=serial chains $n_chained of the decode step's $n_all launches"; fail=1; }
[[ -n "$handoff" && "$handoff" == "$wide_cpu" ]] ||
  { echo "FAIL: the wide model's tokens with POLYCL_HANDOFF=serial differ from the CPU backend's"; fail=1; }
# A wait that gives up (POLYCL_FAULT=handoff@3: the third decode step's first chained launch left
# out, so the launch after it waits for arrivals that never come, as one that found no places on
# a GPU would): the failure record, read behind every compute and looked at in the host's next
# wait (its synchronize for the logits), names the launch that waited and the one it waited on
# (the chain's first), and that compute runs again in order there, after the inputs it overwrote
# (the token embeddings, under the first layer's output) are copied back (plan/rerun.rs), and the
# logits read again, so the host sees no error (greedy --retry counts none) and gets the tokens of
# the centered wide model without the hand-off, whose sums the hand-off keeps bit for bit; the
# device goes on with the hand-off (the first of the GIVE_UPS_KEPT computes it runs again and keeps
# it through, handoff.rs). Then
# with POLYCL_HANDOFF_CHECK=2 (the record read every second compute, here the one that gave up;
# 64 found none in these 8 steps and gave wrong tokens), that compute fails with the error
# instead, and the step decoded again gives those tokens.
gave_up() { # [VAR=value...]: "waiter waited|message|retried|tokens" with the fault at step 3
  local out
  out=$(env "$@" POLYCL_HANDOFF=serial POLYCL_FAULT=handoff@3 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" \
    "$GREEDY" -m "$WIDEC" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev POLYCL0 --retry 2>&1) || true
  local named
  named=$(echo "$out" | grep -oE 'hand-off waits gave up on the launch before theirs, the last in launch [0-9]+ \(kernel_[a-z0-9_]+\) waiting on launch [0-9]+ \(kernel_[a-z0-9_]+\)[^(]*' | head -n 1)
  echo "$(echo "$named" | sed -n 's/.*launch \([0-9]*\) (.*waiting on launch \([0-9]*\) (.*/\1 \2/p')|$named|$(echo "$out" |
    grep '^retried:' || true)|$(echo "$out" | grep '^tokens:' || true)"
}
IFS='|' read -r pair named retried tokens <<<"$(gave_up)"
read -r waiter waited <<<"${pair:-0 0}"
echo "centered wide model, a hand-off wait that gives up: ${named:-no message}; ${retried:-no retry}; polycl $tokens"
[[ $named == *"the compute runs again in order before the host's wait returns, and the device goes on with the hand-off"* && $waiter == $((waited + 1)) && $retried == "retried: 0" &&
  $tokens == "$widec" ]] ||
  { echo "FAIL: a hand-off wait that gave up was not found behind its compute and run again"; fail=1; }
IFS='|' read -r pair named retried tokens <<<"$(gave_up POLYCL_HANDOFF_CHECK=2)"
echo "the same, POLYCL_HANDOFF_CHECK=2: ${named:-no error}; ${retried:-no retry}; polycl $tokens"
[[ -n $pair && $named != *"runs again"* && $retried == "retried: 1" && $tokens == "$widec" ]] ||
  { echo "FAIL: with POLYCL_HANDOFF_CHECK=2 a hand-off wait that gave up was not reported once and recovered from"; fail=1; }
# The output's rotation in the attention's merge (passes/fuse/fa_rotation.rs) makes the sums of
# the Hadamard launch it replaces, bit for bit: the centered wide model's tokens with a q8_0
# cache equal polycl's without the fusion (POLYCL_FUSE_SKIP=fa_rotation) and the CPU backend's,
# and no decode step of its six layers launches kernel_hadamard_f32.
rot_run() { # VAR=value...: the centered wide model with a q8_0 cache; tokens, then rotation launches
  local out
  out=$(env "$@" POLYCL_LOG=1 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" -m "$WIDEC" \
    --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev POLYCL0 -v --ctk q8_0 --ctv q8_0 2>&1) ||
    { echo "$out" | grep -v launches | tail -n 3 >&2; }
  echo "$(echo "$out" | grep '^tokens:' || true)|$(echo "$out" | sed -n 's/.*: launches: //p' | tail -n 1 |
    grep -ow kernel_hadamard_f32 | wc -l)"
}
rot_cpu=$("$GREEDY" -m "$WIDEC" --fa on --prompt-tokens 8 -b 16 -n 8 -t 1 --dev none --ctk q8_0 --ctv q8_0 2>&1 |
  grep '^tokens:') || die "CPU generation with the centered wide model and a q8_0 cache failed"
IFS='|' read -r rot_fused rot_fused_n <<<"$(rot_run)"
IFS='|' read -r rot_apart rot_apart_n <<<"$(rot_run POLYCL_FUSE_SKIP=fa_rotation)"
echo "centered wide model, q8_0 cache: CPU $rot_cpu; rotation in the attention $rot_fused ($rot_fused_n" \
  "rotation launches); apart $rot_apart ($rot_apart_n)"
[[ -n $rot_fused && $rot_fused == "$rot_apart" && $rot_fused == "$rot_cpu" && $rot_fused_n == 0 && $rot_apart_n == 6 ]] ||
  { echo "FAIL: the output's rotation in the attention changed the tokens or kept its launches"; fail=1; }
# With a quantized cache the decode step is one chain too (kernel_rope_rot_store_f32 chained: the
# hand-off only takes plans whose chained launches form one run) of every launch but the first
# (the norm), the lm head where it is wider than the device holds at once (handoff.rs
# `unchain_wide_last`) and one more for an odd count, its sums the CPU backend's.
IFS='|' read -r chains handoff <<<"$(serial_run "$WIDEC" --ctk q8_0 --ctv q8_0)"
echo "centered wide model, q8_0 cache, POLYCL_HANDOFF=serial: chained/launches/chains: ${chains:-none}; polycl $handoff"
read -r n_chained n_all n_chains <<<"${chains:-0 0 0}"
(( n_chains == 1 && n_chained + 3 >= n_all )) ||
  { echo "FAIL: a q8_0 cache's decode step is not one chain of all its launches but the first and the lm head"; fail=1; }
[[ -n "$handoff" && "$handoff" == "$rot_cpu" ]] ||
  { echo "FAIL: the tokens with a q8_0 cache and POLYCL_HANDOFF=serial differ from the CPU backend's"; fail=1; }
# The output norm's row, which the lm head's kernel writes for the host where the host asks
# for embeddings (llama marks the row an output): every generation step's against the CPU
# backend's (measured: ~7e-4 of the row's largest value; the decode steps run
# kernel_mul_mv_normed_q4_0). The row depends on every layer's attention and O projection, so
# this also checks them by heads (POLYCL_ATTN_OH=1, kernel_attn_oh_q4_0_*: 6.8e-4), one
# work-group a head and, with POLYCL_ATTN_OH_SPLIT=3, three, whose shares of W_o's rows are
# not equal (the fixed-point sums give the same bits).
EMBD=$(mktemp -d)
trap 'rm -rf "$KERNELS" "$EMBD"' EXIT
"$GREEDY" -m "$WIDE" --fa on --prompt-tokens 8 -b 16 -n 6 -t 1 --dev none --embd "$EMBD/cpu" >/dev/null 2>&1 ||
  die "CPU generation with embeddings failed"
for run in default 1 3; do
  if [[ $run == default ]]; then vars=(); want=kernel_mul_mv_normed_q4_0
  else vars=(POLYCL_ATTN_OH=1 "POLYCL_ATTN_OH_SPLIT=$run"); want="kernel_mul_mv_normed_q4_0 kernel_attn_oh_q4_0_d64"; fi
  out=$(env "${vars[@]}" POLYCL_LOG=1 POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" \
    -m "$WIDE" --fa on --prompt-tokens 8 -b 16 -n 6 -t 1 --dev POLYCL0 -v --embd "$EMBD/polycl-$run" 2>&1) ||
    { echo "$out" | grep -v launches | tail -n 3; die "generation with embeddings failed (${vars[*]})"; }
  step=$(echo "$out" | sed -n 's/.*: launches: //p' | tail -n 1)
  for k in $want; do
    grep -qw "$k" <<<"$step" || { echo "FAIL: with embeddings (${vars[*]}), the decode step runs no $k"; fail=1; }
  done
  echo -n "${vars[*]:-defaults}: "
  python3 - "$EMBD/cpu" "$EMBD/polycl-$run" 2048 <<'PY' || fail=1
import array, sys
cpu, pcl = (array.array("f", open(p, "rb").read()) for p in sys.argv[1:3])
n = int(sys.argv[3])
if len(cpu) != len(pcl) or len(cpu) % n or not cpu:
    sys.exit(f"FAIL: embeddings of {len(cpu)} and {len(pcl)} floats")
worst = max(max(abs(a - b) for a, b in zip(cpu[s:s + n], pcl[s:s + n])) / max(abs(a) for a in cpu[s:s + n])
            for s in range(0, len(cpu), n))
print(f"output norm's row against the CPU backend: largest error {worst:.2e} of the row's largest value")
if not worst < 5e-3:
    sys.exit("FAIL: the output norm's row differs from the CPU backend's")
PY
done
cmp -s "$EMBD/polycl-1" "$EMBD/polycl-3" ||
  { echo "FAIL: the output norm's row differs between POLYCL_ATTN_OH_SPLIT=1 and 3"; fail=1; }

# POLYCL_PROFILE_TWICE (benchmarks: what one kernel costs inside the launch
# chain) launches the named kernel twice: one more GLU launch a layer.
n2=$(launches 2 on)
n2t=$(POLYCL_PROFILE_TWICE=kernel_mul_mv_glu_q4_0 launches 2 on)
echo "POLYCL_PROFILE_TWICE=kernel_mul_mv_glu_q4_0, fa on: 2 layers $n2 -> $n2t"
if [[ -z "$n2" || -z "$n2t" ]] || (( n2t != n2 + 2 )); then
  echo "FAIL: POLYCL_PROFILE_TWICE did not launch the GLU kernel twice a layer"; fail=1
fi

# POLYCL_PROFILE=span (where a token's time goes, runtime/profile.rs): a line for each compute
# (logged at the next one) with the decode step's launch count, its GPU span, the GPU's idle
# time before it and the host's set_tensor calls in that time.
out=$(POLYCL_PROFILE=span POLYCL_FAST_KERNELS=1 GGML_BACKEND_PATH="$POLYCL_LIB" "$GREEDY" \
  -m "$MDIR/tiny-q4_0-2.gguf" --fa on --prompt-tokens 8 -b 16 -n 4 -t 1 --dev POLYCL0 -v 2>&1) ||
  { echo "$out" | tail -n 20 >&2; die "generation with POLYCL_PROFILE=span failed"; }
spans=$(grep -cE "span: $n2 launches, enqueued in [0-9.]+ us, .*GPU span [0-9.]+ us, GPU idle [0-9.]+ us before it;.* set_tensor [0-9]+ in" <<<"$out" || true)
echo "POLYCL_PROFILE=span, fa on: $spans decode-step lines"
grep -m1 "span: $n2 launches" <<<"$out" || true
if (( spans < 2 )); then
  echo "FAIL: POLYCL_PROFILE=span logged fewer than 2 decode steps of $n2 launches"; fail=1
fi

# The step kernel (POLYCL_STEP=1): a decode step's launches no longer grow
# with the layer count.
n2=$(POLYCL_STEP=1 launches 2 on)
n6=$(POLYCL_STEP=1 launches 6 on)
grep -qw kernel_step "$KERNELS" || { echo "FAIL: POLYCL_STEP=1 decode step runs no kernel_step"; fail=1; }
echo "step kernel, fa on: decode step launches: 2 layers $n2, 6 layers $n6"
if [[ -z "$n2" || "$n2" != "$n6" ]]; then
  echo "FAIL: with POLYCL_STEP=1 the decode step's launches grow with layers"; fail=1
fi
(( fail == 0 )) && echo "launch budget: passed"
exit "$fail"
