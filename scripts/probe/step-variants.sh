#!/usr/bin/env bash
# On the GPU machine, after scripts/bench-gpu.sh built the host and made the
# models: decode (tg128, fa 1) with the step kernel off, with its default
# weight limit, and with every decode kernel in it (POLYCL_STEP_MAX_MB=64
# takes all but the output matrix); then the 1B's greedy tokens with all of
# it against the step kernel off.
W=${W:-/tmp/polycl-gpu}
BIN=${BIN:-$W/build/bin}
LIB=${POLYCL_LIB:-$PWD/target/gpu/libggml-polycl.so}
run() { # model, label, env...
  local m=$1 label=$2; shift 2
  printf '%-8s %-34s %s\n' "$m" "$label" "$(env "$@" GGML_BACKEND_PATH=$LIB timeout 200 "$BIN/llama-bench" \
    -m "$W/$m.gguf" -dev POLYCL0 -ngl 99 -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E 'tg128|error' |
    awk -F'|' '{print $(NF-1)}')"
}
for m in m1-q4_0 m7-q4_0; do
  run $m "POLYCL_STEP=0" POLYCL_STEP=0
  run $m "POLYCL_STEP=1 (max 8 MiB)" POLYCL_STEP=1
  run $m "POLYCL_STEP=1 POLYCL_STEP_MAX_MB=64" POLYCL_STEP=1 POLYCL_STEP_MAX_MB=64
done
if [[ -x $W/greedy ]]; then
  for fa in on off; do
    a=$(POLYCL_STEP=0 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$W/m1-q4_0.gguf" --dev POLYCL0 \
      --fa $fa -n 32 --prompt-tokens 40 -b 16 2>/dev/null | grep '^tokens:')
    b=$(POLYCL_STEP=1 POLYCL_STEP_MAX_MB=64 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" \
      -m "$W/m1-q4_0.gguf" --dev POLYCL0 --fa $fa -n 32 --prompt-tokens 40 -b 16 2>/dev/null | grep '^tokens:')
    [[ -n $a && $a == "$b" ]] && echo "m1 fa=$fa, all kernels in step launches: same tokens as POLYCL_STEP=0" ||
      echo "m1 fa=$fa: DIFFERENT: $a / $b"
  done
fi
