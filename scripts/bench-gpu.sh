#!/usr/bin/env bash
# On the NVIDIA machine (see shared/GPU.md): builds the pinned llama.cpp with
# CUDA, makes random llama models, and runs llama-bench for the CUDA backend and
# for polycl (same build, same model, same flags) in one command, printing the
# ratios. Needs, in the tree: .ocl/*.deb (ICD loader), .ocl/llama-src.tgz (the
# sdist's vendor/llama.cpp) and target/release/libggml-polycl.so.
#   stage=build  bash scripts/bench-gpu.sh   # starts the CUDA build (background)
#   stage=bench  bash scripts/bench-gpu.sh   # models + llama-bench, prints ratios
set -uo pipefail
cd "$(dirname "$0")/.."
W=${W:-/tmp/polycl-gpu}
mkdir -p "$W" /tmp/o /tmp/icd
for f in .ocl/*.deb; do dpkg -x "$f" /tmp/o; done
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=/tmp/o/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
LIB=$PWD/target/release/libggml-polycl.so
BIN=$W/build/bin

build() {
  if [[ ! -d $W/vendor/llama.cpp ]]; then tar xzf .ocl/llama-src.tgz -C "$W"; touch "$W/vendor/llama.cpp/ggml/ggml.pc.in"; fi
  cmake -S "$W/vendor/llama.cpp" -B "$W/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF \
    -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_SERVER=OFF > "$W/cmake.log" 2>&1
  cmake --build "$W/build" -j "$(nproc)" --target llama-bench test-backend-ops llama-simple ggml-cuda ggml-cpu > "$W/build.log" 2>&1
  echo "build rc=$?" >> "$W/build.log"
}

bench_one() { # model, label
  local m=$1 label=$2 cuda polycl
  cuda=$("$BIN/llama-bench" -m "$m" -dev CUDA0 -ngl 99 -fa 0,1 -p 512 -n 128 -r 2 -o csv 2>/dev/null | tail -n +2)
  polycl=$(GGML_BACKEND_PATH=$LIB "$BIN/llama-bench" -m "$m" -dev POLYCL0 -ngl 99 -fa 0,1 -p 512 -n 128 -r 2 -o csv 2>"$W/polycl-$label.err" | tail -n +2)
  echo "== $label"
  echo "CUDA:";   echo "$cuda"   | awk -F, '{print "  " $0}' | cut -c1-400
  echo "polycl:"; echo "$polycl" | awk -F, '{print "  " $0}' | cut -c1-400
  tail -3 "$W/polycl-$label.err"
}

case ${stage:-bench} in
  build) setsid bash -c "$(declare -f build); W=$W build" > /dev/null 2>&1 & echo started ;;
  status) tail -3 "$W/build.log" 2>/dev/null ;;
  bench)
    [[ -f $W/m7-q4_0.gguf ]] || python3 scripts/make-model-raw.py "$W/m7-q4_0.gguf" --preset 7b --type q4_0
    [[ -f $W/m1-q4_0.gguf ]] || python3 scripts/make-model-raw.py "$W/m1-q4_0.gguf" --preset 1b --type q4_0
    bench_one "$W/m7-q4_0.gguf" 7b-q4_0
    bench_one "$W/m1-q4_0.gguf" 1b-q4_0 ;;
esac
