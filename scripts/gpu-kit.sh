#!/usr/bin/env bash
# On the development machine: packs what a device run of scripts/bench-gpu.sh needs, for the
# device tool's `carry` (64 MiB in all): [".ocl", "target/gpu"].
#   .ocl/*.deb           the OpenCL ICD loader and headers (the GPU machine has none, shared/GPU.md)
#   .ocl/llama-src.tgz   the pinned host's llama.cpp sources, for the CUDA build (stage=build)
#   target/gpu/bin       the pinned CPU-only host (scripts/host.sh), for HOST_BIN: the polycl-only
#                        stages then build nothing on the device
#   target/gpu/polycl.so the release library, stripped (POLYCL_LIB)
#   target/gpu/models    the quantized test models (scripts/models.sh), for greedy_check
# Then, on the device (scripts/gpu-job.sh keeps a stage running across calls):
#   bash scripts/gpu-job.sh start 'POLYCL_LIB=$PWD/target/gpu/polycl.so HOST_BIN=$PWD/target/gpu/bin \
#     CUDA=OFF stage=trial bash scripts/bench-gpu.sh'
# Idempotent; run it again after a rebuild (only the library changes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/common.sh
HOST=$(bash scripts/host.sh | tail -n 1)
mkdir -p .ocl target/gpu
if ! ls .ocl/ocl-icd-libopencl1_*.deb >/dev/null 2>&1; then
  (cd .ocl && apt-get download ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers clinfo)
fi
if [[ ! -f .ocl/llama-src.tgz ]]; then
  # Without the models, docs and benches folders (~115 MB the build never reads): ~12 MB.
  tar czf .ocl/llama-src.tgz -C "$HOST/src" --exclude=vendor/llama.cpp/models \
    --exclude=vendor/llama.cpp/docs --exclude=vendor/llama.cpp/benches vendor/llama.cpp
fi
rm -rf target/gpu/bin
mkdir -p target/gpu/bin
# The libraries and the tools the stages run; the host's build folder holds object files too.
cp -a "$HOST"/build/bin/. target/gpu/bin/
mkdir -p target/gpu/models
cp "$(bash scripts/models.sh | tail -n 1)"/model-{Q4_0,Q8_0,Q4_K_M}.gguf target/gpu/models/
cargo build --release
strip -o target/gpu/polycl.so target/release/libggml_polycl.so
du -sh .ocl target/gpu
