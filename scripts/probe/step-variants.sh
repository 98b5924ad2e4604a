#!/usr/bin/env bash
# On the GPU machine, after `CUDA=OFF stage=build bash scripts/bench-gpu.sh`
# and the models: 7B Q4_0 and 1B Q4_0 decode (tg128, fa 1) with the step
# kernel off, and on with each prefetch setting (POLYCL_STEP_PREFETCH_*).
W=${W:-/tmp/polycl-gpu}
BIN=${BIN:-$W/build-nocuda/bin}
LIB=${POLYCL_LIB:-$PWD/target/gpu/libggml-polycl.so}
run() { # label, env...
  local label=$1; shift
  for m in m7-q4_0 m1-q4_0; do
    printf '%-28s %-8s %s\n' "$label" "$m" "$(env "$@" GGML_BACKEND_PATH=$LIB timeout 200 "$BIN/llama-bench" \
      -m "$W/$m.gguf" -dev POLYCL0 -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|error' |
      awk -F'|' '{print $(NF-1)}')"
  done
}
run "step off" POLYCL_STEP=0
run "step, no prefetch" POLYCL_STEP=1 POLYCL_STEP_PREFETCH_MB=0
run "step, 16 MiB at end" POLYCL_STEP=1 POLYCL_STEP_PREFETCH_MB=16
run "step, 16 MiB at start" POLYCL_STEP=1 POLYCL_STEP_PREFETCH_MB=16 POLYCL_STEP_PREFETCH_AT=start
run "step, 32 MiB at start" POLYCL_STEP=1 POLYCL_STEP_PREFETCH_MB=32 POLYCL_STEP_PREFETCH_AT=start
run "step, 8 MiB at end" POLYCL_STEP=1 POLYCL_STEP_PREFETCH_MB=8
run "step, 64 MiB at start" POLYCL_STEP=1 POLYCL_STEP_PREFETCH_MB=64 POLYCL_STEP_PREFETCH_AT=start
