#!/usr/bin/env bash
# On the GPU machine after `CUDA=OFF stage=build` and the models: decode with
# every decode kernel in step launches, by register cap, against no step.
W=${W:-/tmp/polycl-gpu}
BIN=${BIN:-$W/build-nocuda/bin}
LIB=${POLYCL_LIB:-$PWD/target/gpu/libggml-polycl.so}
for mr in m7-q4_0:none m7-q4_0:64 m7-q4_0:96 m1-q4_0:64; do
  m=${mr%:*} r=${mr#*:}
  {
    e="POLYCL_STEP=1 POLYCL_STEP_MAX_MB=64"; [[ $r == none ]] || e="$e POLYCL_STEP_MAXRREG=$r"
    out=$(env $e POLYCL_LOG=1 GGML_BACKEND_PATH=$LIB timeout 100 "$BIN/llama-bench" -m "$W/$m.gguf" -dev POLYCL0 \
      -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1)
    echo "$m regs $r: $(echo "$out" | grep tg128 | awk -F'|' '{print $(NF-1)}') $(echo "$out" | grep -o 'step kernel[^;]*' | head -1)"
  }
done
