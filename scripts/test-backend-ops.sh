#!/usr/bin/env bash
# ggml's own conformance suite against the CPU backend, for every op polycl
# claims, on POLYCL0. Prints the pass counts per op; fails on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh
PREFIX=$(bash scripts/host.sh)
TBO="$PREFIX/build/bin/test-backend-ops"
LIB=$POLYCL_LIB
DEV=${POLYCL_TEST_DEVICE:-POLYCL0}
OPS=${POLYCL_TEST_OPS:-"ADD SUB MUL DIV SCALE SILU GELU GELU_QUICK SWIGLU GEGLU RMS_NORM NORM \
MUL_MAT MUL_MAT_HADAMARD ROPE SOFT_MAX GET_ROWS SET_ROWS CPY CONT DUP FLASH_ATTN_EXT SUM_ROWS CONCAT"}
[[ -f "$LIB" ]] || { echo "missing $LIB: build polycl first" >&2; exit 1; }
total_pass=0; total_fail=0; failed_ops=()
for op in $OPS; do
  log=$(mktemp)
  rc=0
  GGML_BACKEND_PATH="$LIB" "$TBO" test -b "$DEV" -o "$op" >"$log" 2>&1 || rc=$?
  line=$(tbo_passed_line "$log")
  printf '%-16s %s\n' "$op" "${line:-no tests run}"
  if [[ $rc -ne 0 ]] || ! tbo_all_passed "$line"; then
    failed_ops+=("$op")
    grep -E 'FAIL|error|Assert|abort' "$log" | head -20 || true
    total_fail=$((total_fail+1))
  else
    total_pass=$((total_pass+1))
  fi
  rm -f "$log"
done
# The GPU-only fast kernels (matmul, split-KV flash attention), forced onto
# this device so CI checks them too; "mma": the tensor-core prompt matmuls
# and flash attention tiles, through their portable emulation of mma.sync
# (flash attention on the shapes of up to 1024 keys: the emulation takes
# minutes on the 4096-16384-key cases, which the float tile covers; nb=1 and
# 3 with 4 or 12 query heads a KV head are the decode GQA kernel's).
if [[ -z "${POLYCL_TEST_OPS:-}" ]]; then
  for run in MUL_MAT:fast FLASH_ATTN_EXT:fast FLASH_ATTN_EXT:onechunk MUL_MAT:mma FLASH_ATTN_EXT:mma \
    FLASH_ATTN_EXT:cols; do
    op=${run%%:*} kind=${run#*:}
    filter=()
    [[ $run == FLASH_ATTN_EXT:mma ]] && filter=(-p "kv=(113|512|1024),nb=(1|3|32|75),")
    # "cols": the decode shapes from 512 positions, where the tensor-core kernel with a KV
    # head's query heads as its tile's columns (from 512 positions here, POLYCL_FA_COLS_KV;
    # from 16384 by default) takes the caches with 1 or 4 query heads a KV head, the
    # long-cache kernel those with 12.
    [[ $run == FLASH_ATTN_EXT:cols ]] && filter=(-p "kv=(512|1024),nb=(1|3),")
    # "onechunk": the decode shapes with the cache split as little as the
    # split kernel allows (POLYCL_FA_GROUPS=1), so every head of up to 256
    # positions is one chunk and takes the path without the merge's counter.
    [[ $kind == onechunk ]] && filter=(-p "nb=1,")
    # The mma and fast runs must reach their kernels, not only pass through
    # their fallbacks: the plan log (POLYCL_LOG) names every launch.
    case $run in
      MUL_MAT:mma) want="kernel_mul_mm_mma_q4_0 kernel_mul_mm_mma_q8_0 kernel_mul_mm_mma_q4_k kernel_mul_mm_mma_q6_k" ;;
      FLASH_ATTN_EXT:mma) want="kernel_fa_mma_d64 kernel_fa_mma_d128 kernel_fa_gqa_d64 kernel_fa_gqa_d128" ;;
      FLASH_ATTN_EXT:cols) want="kernel_fa_gqa_cols_d64 kernel_fa_gqa_cols_d128 kernel_fa_long_gqa2_d128" ;;
      # With POLYCL_ATTN_O=1 (below) caches of up to 256 positions (POLYCL_FA_SHORT_KV) take the
      # short kernel that the attention + O pair runs; longer ones at head sizes 64 and 128
      # the long-cache kernel (POLYCL_FA_LONG_KV=512 below; POLYCL_FA_LONG_GROUPS=64 splits
      # even a 2-core PoCL's caches into chunks and merges them), its _gqa kernels where 4 or
      # 12 query heads share a KV head; other head sizes the vector kernels. Q8_0 caches go to
      # the long-cache kernels that read their blocks (POLYCL_FA_Q8_KV, every length by
      # default), Q4_0 ones through their F16 copies (kernel_cpy_q4_0_f16).
      FLASH_ATTN_EXT:fast) want="kernel_fa_short_d64 kernel_fa_short_d128 kernel_fa_long_d64 kernel_fa_long_d128 kernel_fa_long_gqa4_d64 kernel_fa_long_gqa2_d128 kernel_fa_vec_d64 kernel_fa_vec_d128 kernel_fa_long_q8_d64 kernel_fa_long_q8_gqa4_d64 kernel_fa_long_q4_d64 kernel_fa_long_q4_gqa4_d64 kernel_cpy_q4_0_f16 buffers.by.address" ;;
      # One chunk a head: up to 256 positions (POLYCL_FA_ONE_KV) one group a head takes the
      # whole cache, longer ones the vector kernels' 256-position chunks where the long-cache
      # kernel does not take them (from 512 positions below, at head sizes 64 and 128, its
      # whole cache in one chunk: POLYCL_FA_LONG_GROUPS=1; 2 query heads a group at most,
      # POLYCL_FA_LONG_HEADS=2, so its two-head kernels run at both head sizes).
      FLASH_ATTN_EXT:onechunk) want="kernel_fa_one_d64 kernel_fa_one_d128 kernel_fa_vec_d64 kernel_fa_vec_d128 kernel_fa_long_d64 kernel_fa_long_d128 kernel_fa_long_gqa2_d64 kernel_fa_long_gqa2_d128" ;;
      # The decode matvecs with their buffers by address (runtime/addresses.rs, the default;
      # the onechunk run takes them as arguments).
      MUL_MAT:fast) want="kernel_mul_mv_q4_0 kernel_mul_mv_q8_0 kernel_mul_mv_q4_k kernel_mul_mv_q6_k buffers.by.address" ;;
      *) want="" ;;
    esac
    log=$(mktemp); rc=0
    # POLYCL_FA_GQA_MIN_KV=0: the GQA kernel takes the decode shapes of every
    # cache length, the shortest ones too (which it leaves to the vector
    # kernel by default), and in the mma run the longest too, which the
    # long-cache kernel takes before it elsewhere (from 512 positions, the
    # default; POLYCL_FA_LONG_KV=0 here). The mma run publishes the split's chunks with a
    # device fence a work-item (POLYCL_FA_ONE_FENCE=0), the others with one a group (default).
    long_kv=$([[ $kind == mma ]] && echo 0 || echo 512)
    POLYCL_FAST_KERNELS=1 POLYCL_MMA=$([[ $kind == mma || $kind == cols ]] && echo 1 || echo 0) \
      POLYCL_FA_GROUPS=$([[ $kind == onechunk ]] && echo 1 || echo 256) POLYCL_FA_GQA_MIN_KV=0 \
      POLYCL_LOG=$([[ -n $want ]] && echo 1 || echo 0) \
      POLYCL_ATTN_O=$([[ $run == FLASH_ATTN_EXT:fast ]] && echo 1 || echo 0) \
      POLYCL_FA_LONG_KV=$long_kv POLYCL_FA_COLS_KV=$([[ $kind == cols ]] && echo 512 || echo 0) \
      POLYCL_FA_ONE_FENCE=$([[ $kind == mma ]] && echo 0 || echo 1) \
      POLYCL_FA_LONG_GROUPS=$([[ $kind == onechunk ]] && echo 1 || echo 64) \
      POLYCL_FA_LONG_HEADS=$([[ $kind == onechunk ]] && echo 2 || echo 4) \
      POLYCL_BUFFER_ADDRESSES=$([[ $kind == onechunk ]] && echo 0 || echo 1) \
      GGML_BACKEND_PATH="$LIB" "$TBO" test -b "$DEV" -o "$op" "${filter[@]}" >"$log" 2>&1 || rc=$?
    line=$(tbo_passed_line "$log")
    missing=""
    for k in $want; do grep -qE "$k" "$log" || missing="$missing $k"; done
    printf '%-16s %s\n' "$op ($kind)" "${line:-no tests run}${missing:+; never launched:$missing}"
    if [[ $rc -ne 0 ]] || [[ -n "$missing" ]] || ! tbo_all_passed "$line"; then
      failed_ops+=("$op($kind)"); total_fail=$((total_fail+1))
      grep -E 'FAIL' "$log" | head -20 || true
    else
      total_pass=$((total_pass+1))
    fi
    rm -f "$log"
  done
fi
echo "test-backend-ops: $total_pass passed, $total_fail failed"
[[ ${#failed_ops[@]} -eq 0 ]] || { echo "failing ops: ${failed_ops[*]}"; exit 1; }
