#!/usr/bin/env bash
# On the NVIDIA machine (see shared/GPU.md): builds the pinned llama.cpp with
# CUDA, makes random llama models, and runs llama-bench for the CUDA backend and
# for polycl (same build, same model, same flags) in one command, printing the
# ratios. Needs, in the tree: .ocl/*.deb (ICD loader), .ocl/llama-src.tgz (the
# sdist's vendor/llama.cpp) and target/release/libggml-polycl.so.
#   stage=build  bash scripts/bench-gpu.sh   # starts the CUDA build (background)
#   stage=bench  bash scripts/bench-gpu.sh   # models + llama-bench, prints ratios
#   stage=closing bash scripts/bench-gpu.sh  # build and models side by side, then bench (~10 min
#                                            # on a fresh machine: start it with setsid, output to
#                                            # a file, and poll that file in later calls; with
#                                            # HOST_BIN, a carried CPU-only host, only the CUDA
#                                            # backend is built: ~3.5 min)
#   stage=all    bash scripts/bench-gpu.sh   # build, models, profile, bench, greedy, backend ops
#   CUDA=OFF stage=step bash scripts/bench-gpu.sh  # polycl alone: step kernel off/on
#   stage=profile bash scripts/bench-gpu.sh  # polycl alone: fusions off/on/newest off, launches and host
#                                            # enqueue time per token, time to first token
#   CUDA=OFF stage=twice bash scripts/bench-gpu.sh  # polycl alone: each decode kernel's cost in the
#                                            # launch chain (POLYCL_PROFILE_TWICE), 7B Q4_0 fa1
#   CUDA=OFF stage=tiles bash scripts/bench-gpu.sh  # polycl alone: prompt speed per POLYCL_MMA_TILE
#   CUDA=OFF stage=ab POLYCL_LIB_OLD=old.so bash scripts/bench-gpu.sh  # two polycl builds, decode
#                                            # tg128 fa1, alternating OLD NEW OLD NEW (AB_MODELS)
#   CUDA=OFF stage=abdepth POLYCL_LIB_OLD=old.so bash scripts/bench-gpu.sh  # the same at depth:
#                                            # tg64 fa1 -r 1 after each of DEPTHS cached positions
#   CUDA=OFF stage=sweep SWEEP_VAR=POLYCL_FA_GROUPS SWEEP_VALUES="32 256" bash scripts/bench-gpu.sh
#                                            # one build, a variable's values, alternating, twice
#                                            # (SWEEP_MEASURE=tg_depth: at DEPTHS, e.g. the GQA crossover:
#                                            # SWEEP_VAR=POLYCL_FA_GQA_MIN_KV SWEEP_VALUES="0 100000"
#                                            # DEPTHS=512,1024,2048 AB_MODELS=m1-q4_0)
#   stage=depth bash scripts/bench-gpu.sh    # decode at depth: tg128 after 0 / 4096 / 16384 cached
#                                            # positions (DEPTHS), CUDA and polycl, 1B and 7B Q4_0 (DEPTH_MODELS);
#                                            # each llama-bench run bounded by DEPTH_TIMEOUT (150 s)
#   CUDA=OFF stage=depthprof bash scripts/bench-gpu.sh  # polycl alone: a DEPTH-token prompt's time
#                                            # and a decode step's GPU time per kernel after it
#   CUDA=OFF stage=groups bash scripts/bench-gpu.sh  # polycl alone: each decode launch's work-groups
#                                            # on the GPU's clock: gaps, waves, tails (AB_MODELS, step 64)
#   CUDA=OFF stage=span bash scripts/bench-gpu.sh  # polycl alone: a decode token's GPU span, the GPU's
#                                            # idle time between tokens and the host's part of it
#                                            # (POLYCL_PROFILE=span medians, AB_MODELS)
#   CUDA=OFF stage=trial bash scripts/bench-gpu.sh  # polycl alone: the settings built but not yet
#                                            # measured on a GPU (TRIAL_VARS: VAR, off 0 and on 1,
#                                            # or VAR=OFF/ON), each: MUL_MAT against
#                                            # the CPU backend, greedy tokens against the default's,
#                                            # tg128 fa1 off and on, twice (TRIAL_MODELS, default "m7-q4_0
#                                            # m7-q8_0 m1-q4_0 m7-q4_k_m"; "trial" lines: each model's
#                                            # mean t/s off and on, and on/off), a decode step's device time
#                                            # by kernel off and on, the kernels' registers and dp4a
#                                            # loops; scripts/gpu-kit.sh packs its carry
#   stage=one BENCH_MODELS="m7-q8_0" BENCH_FLAGS="-fa 0,1 -p 0 -n 128" bash scripts/bench-gpu.sh
#                                            # bench_one (CUDA and polycl, ratios) on chosen models
#   CUDA=OFF stage=fa bash scripts/bench-gpu.sh  # polycl's flash-attention kernels against the CPU
#                                            # backend: ctest's per-head masks and test-backend-ops
#                                            # FLASH_ATTN_EXT under each of FA_ENVS (see fa_check)
#   stage=regs bash scripts/bench-gpu.sh     # registers per kernel (ptxas -v) of the cached programs
#                                            # (and `loops KERNEL...`: their dp4a loops' instructions)
#   stage=probe PROBE=matvec-act bash scripts/bench-gpu.sh  # builds and runs scripts/probe/$PROBE.c
#                                            # (or $PROBE.cu with nvcc: PROBE=kernel-gap-cuda)
#                                            # (with PROBE_ARGS)
#   (AB_MODELS: model names m<7|1|tiny|wide>-<type>, made by make-model-raw.py when missing;
#   default "m7-q4_0 m1-q4_0 m7-q8_0")
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
W=${W:-/tmp/polycl-gpu}
mkdir -p "$W" /tmp/o /tmp/icd
for f in .ocl/*.deb; do dpkg -x "$f" /tmp/o; done
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=/tmp/o/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
LIB=${POLYCL_LIB:-$PWD/target/release/libggml-polycl.so}
# Models of stage=ab and stage=sweep.
AB_MODELS=${AB_MODELS:-m7-q4_0 m1-q4_0 m7-q8_0}
# CUDA=OFF builds the host without the CUDA backend (minutes faster; polycl-only stages).
# WITH_CUDA and CARRIED_HOST keep CUDA and HOST_BIN for the functions below: a
# session script that sources this file with `CUDA=... source` gets its
# assignments undone when the source returns.
WITH_CUDA=${CUDA:-ON}
CARRIED_HOST=${HOST_BIN:+$(cd "$HOST_BIN" && pwd)}
BUILD=$W/build$([[ $WITH_CUDA == ON ]] || echo -nocuda)
BIN=$BUILD/bin
# HOST_BIN: a prebuilt CPU-only host carried along (the development machine's
# $POLYCL_CACHE/llama-cpp-python-*/build/bin, ~13 MB): the polycl-only stages
# then need no host build on the GPU machine (~2 minutes of device time). With
# CUDA=ON the host is copied to $W/host and build() makes only the CUDA
# backend beside it (~3.5 minutes on the H200 machine's 16 cores), so both
# backends run under the very host of the polycl-only stages: llama-bench
# loads the backends of its folder.
if [[ -n $CARRIED_HOST ]]; then
  if [[ $WITH_CUDA == ON ]]; then mkdir -p "$W/host" && cp -a "$CARRIED_HOST/." "$W/host/"; BIN=$W/host
  else BIN=$CARRIED_HOST; fi
  export LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH
fi

vendor_src() { # the pinned llama.cpp source under $W/vendor (its headers serve host_greedy)
  if [[ ! -d $W/vendor/llama.cpp ]]; then tar xzf .ocl/llama-src.tgz -C "$W"; touch "$W/vendor/llama.cpp/ggml/ggml.pc.in"; fi
}

build() {
  vendor_src
  local dir=$BUILD targets=(llama-bench ggml-cpu test-backend-ops)
  if [[ -n $CARRIED_HOST ]]; then # the carried host; only the CUDA backend is missing
    [[ $WITH_CUDA == ON && ! -f $BIN/libggml-cuda.so ]] || { echo "build rc=0 (carried host)" >> "$W/build.log"; return; }
    dir=$W/build-cuda-only targets=()
  fi
  cmake -S "$W/vendor/llama.cpp" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=$WITH_CUDA \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF \
    -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_SERVER=OFF > "$W/cmake.log" 2>&1 &&
    cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}" \
      $([[ $WITH_CUDA == ON ]] && echo ggml-cuda) > "$W/build.log" 2>&1 &&
    if [[ -n $CARRIED_HOST ]]; then cp "$(find "$dir" -name libggml-cuda.so | head -n 1)" "$BIN/"; fi
  echo "build rc=$?" >> "$W/build.log"
}

bench_one() { # model, label, then llama-bench's test flags (default -fa 0,1 -p 512 -n 128): both
  # backends, same flags; prints t/s and ratios. CUDA_TIMEOUT (default none) and POLYCL_TIMEOUT
  # (default 300 s) bound each run.
  local m=$1 label=$2
  shift 2
  local flags=("$@")
  (( ${#flags[@]} )) || flags=(-fa 0,1 -p 512 -n 128)
  timeout "${CUDA_TIMEOUT:-0}" "$BIN/llama-bench" -m "$m" -dev CUDA0 -ngl 99 "${flags[@]}" -r 2 -o csv \
    > "$W/cuda-$label.csv" 2>/dev/null
  GGML_BACKEND_PATH=$LIB timeout "${POLYCL_TIMEOUT:-300}" "$BIN/llama-bench" -m "$m" -dev POLYCL0 -ngl 99 \
    "${flags[@]}" -r 2 -o csv > "$W/polycl-$label.csv" 2>"$W/polycl-$label.err"
  python3 - "$W/cuda-$label.csv" "$W/polycl-$label.csv" "$label" <<'PY'
import csv, sys
def rows(p):
    out = {}
    for r in csv.DictReader(open(p)):
        test = "pp%s" % r["n_prompt"] if r["n_prompt"] != "0" else "tg%s" % r["n_gen"]
        if r.get("n_depth", "0") != "0":
            test += "@d%s" % r["n_depth"]
        out[(test, r["flash_attn"])] = float(r["avg_ts"])
    return out
c, p = rows(sys.argv[1]), rows(sys.argv[2])
print("== %s" % sys.argv[3])
print("%-12s %-3s %12s %12s %8s" % ("test", "fa", "CUDA t/s", "polycl t/s", "ratio"))
for k in sorted(set(c) | set(p)):
    cv, pv = c.get(k, 0.0), p.get(k, 0.0)
    print("%-12s %-3s %12.1f %12.1f %8.3f" % (k[0], k[1], cv, pv, pv / cv if cv else 0.0))
PY
  tail -2 "$W/polycl-$label.err"
}

host_greedy() { # examples/greedy.c against the host's libraries
  vendor_src
  cc -O2 -o "$W/greedy" examples/greedy.c -I"$W/vendor/llama.cpp/include" \
    -I"$W/vendor/llama.cpp/ggml/include" -L"$BIN" -lllama -lggml -lggml-base -lm -Wl,-rpath,"$BIN"
}

greedy_tokens() { # DEV MODEL FA [VAR=value...]: the "tokens:" line of GREEDY_N (32) greedy tokens
  # after GREEDY_PROMPT (40) prompt tokens in batches of GREEDY_BATCH (16; 512 for long prompts:
  # at 16 a 16500-token prompt took the 1B ~100 s on the H100) on DEV: CUDA0 (the CUDA backend
  # loaded as the GGML_BACKEND_PATH library), none (the CPU backend) or a polycl device ($LIB);
  # GREEDY_ARGS: more arguments of examples/greedy.c (--ctk q8_0 --ctv q8_0); host_greedy first
  local dev=$1 m=$2 fa=$3 load=(GGML_BACKEND_PATH="$LIB")
  shift 3
  case $dev in
    CUDA0) load=(GGML_BACKEND_PATH="$BIN/libggml-cuda.so") ;;
    none) load=(-u GGML_BACKEND_PATH) ;;
  esac
  env "${load[@]}" "$@" timeout 120 "$W/greedy" -m "$m" --dev "$dev" --fa "$fa" -n "${GREEDY_N:-32}" \
    --prompt-tokens "${GREEDY_PROMPT:-40}" -b "${GREEDY_BATCH:-16}" ${GREEDY_ARGS:-} 2>/dev/null | grep '^tokens:'
}

greedy_check() { # same greedy tokens from CUDA and polycl on the small test models
  # (scripts/models.sh output copied to target/gpu/models and carried along)
  local m fa a b
  host_greedy || return
  for m in target/gpu/models/*.gguf $W/m1-q4_0.gguf; do
    [[ -f $m ]] || continue
    for fa in on off; do
      a=$(greedy_tokens CUDA0 "$m" $fa)
      b=$(greedy_tokens POLYCL0 "$m" $fa)
      if [[ -n "$a" && "$a" == "$b" ]]; then echo "greedy $(basename "$m") fa=$fa: same tokens"
      else echo "greedy $(basename "$m") fa=$fa: DIFFERENT"; echo "  CUDA   $a"; echo "  polycl $b"; fi
    done
  done
}

step_check() { # the step kernel (POLYCL_STEP) off and on: decode speed, greedy tokens, launches
  local m s fa a b
  for m in "$W/m7-q4_0.gguf" "$W/m1-q4_0.gguf"; do
    for s in 0 1; do
      echo "== $(basename "$m") POLYCL_STEP=$s"
      POLYCL_STEP=$s GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/llama-bench" -m "$m" -dev POLYCL0 -ngl 99 \
        -fa 0,1 -p 0 -n 128 -r 3 2>&1 | grep -E "tg128|error"
    done
  done
  host_greedy
  for m in target/gpu/models/*.gguf "$W/m1-q4_0.gguf"; do
    [[ -f $m ]] || continue
    for fa in on off; do
      a=$(greedy_tokens POLYCL0 "$m" $fa POLYCL_STEP=0)
      b=$(greedy_tokens POLYCL0 "$m" $fa POLYCL_STEP=1)
      if [[ -n "$a" && "$a" == "$b" ]]; then echo "step greedy $(basename "$m") fa=$fa: same tokens"
      else echo "step greedy $(basename "$m") fa=$fa: DIFFERENT"; echo "  step 0 $a"; echo "  step 1 $b"; fi
    done
  done
  for fa in on off; do
    POLYCL_LOG=1 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$W/m7-q4_0.gguf" --dev POLYCL0 --fa $fa \
      -n 16 --prompt-tokens 8 -b 16 -v 2>&1 | grep -E "step kernel|graph compute: .* launches" | tail -n 3 |
      sed "s/^/fa $fa: /"
  done
}

host_ready() { # the host and, with CUDA=ON, its CUDA backend are built
  [[ -x $BIN/llama-bench && ( $WITH_CUDA != ON || -f $BIN/libggml-cuda.so ) ]]
}

depth_setup() { # the host built where missing, beside the 1B and 7B Q4_0 models of the depth stages
  host_ready || build & make_model "$W/m1-q4_0.gguf" 1b q4_0 &
  make_model "$W/m7-q4_0.gguf" 7b q4_0; wait; tail -1 "$W/build.log" 2>/dev/null
}

make_model() { # file, preset, type[, --centered]: made where missing, under its name only once
  # complete
  [[ -f $1 ]] || { python3 scripts/make-model-raw.py "$1.tmp" --preset "$2" --type "$3" "${@:4}" > /dev/null &&
    mv -f "$1.tmp" "$1"; }
}

# The 1B Q4_0 with weights of mean zero (make-model-raw.py --centered), for the trial's token
# check: the default 1B's greedy tokens are one token repeated (5380) whatever the sums, and the
# centered one's part at the first rounding that differs (the CPU backend's own tokens with fa on
# and off differ from the first), so a setting that must keep the default's sums bit for bit
# shows any that it does not.
M1C=$W/m1c-q4_0.gguf

models() {
  make_model "$W/m7-q4_0.gguf" 7b q4_0 &
  make_model "$W/m1-q4_0.gguf" 1b q4_0 &
  make_model "$W/m7-q8_0.gguf" 7b q8_0 &
  make_model "$W/m7-q4_k.gguf" 7b q4_k &
  # Q4_K with Q6_K where llama-quantize's Q4_K_M puts it (attn_v, ffn_down, output).
  make_model "$W/m7-q4_k_m.gguf" 7b q4_k_m &
  wait
}

profile() { # polycl alone: decode with fusions off, on, and on but the newest; launches, host time
  local m=$W/m7-q4_0.gguf f skip mm
  echo "== POLYCL_FUSE=0 (7b-q4_0)"
  POLYCL_FUSE=0 GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/llama-bench" -m "$m" -dev POLYCL0 -ngl 99 -fa 0,1 \
    -p 0 -n 128 -r 2 2>&1 | grep -E "tg128|error"
  # The newest fusion (matmul_norm, docs/perf.md step 21) skipped and not, alternating, on both
  # model sizes.
  for mm in m7-q4_0 m1-q4_0; do
    for skip in matmul_norm none matmul_norm none; do
      echo "== $mm POLYCL_FUSE_SKIP=$skip"
      POLYCL_FUSE_SKIP=${skip/none/} GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/llama-bench" -m "$W/$mm.gguf" \
        -dev POLYCL0 -ngl 99 -fa 0,1 -p 0 -n 128 -r 2 2>&1 | grep -E "tg128|error"
    done
  done
  host_greedy
  for fa in on off; do
    POLYCL_LOG=1 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$m" --dev POLYCL0 --fa $fa -n 16 \
      --prompt-tokens 8 -b 16 -v 2>&1 | grep -E "graph compute: .* launches" | tail -n 3 |
      sed "s/^/fa $fa: /"
  done
  # GPU time per kernel of one decode step (the last of a short generation).
  for fa in on off; do
    POLYCL_PROFILE=1 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$m" --dev POLYCL0 --fa $fa \
      -n 8 --prompt-tokens 8 -b 16 -v 2>&1 | grep -E "profile:" | tail -n 1 | sed "s/^/fa $fa: /"
  done
  POLYCL_PROFILE=1 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$m" --dev POLYCL0 --fa on \
    -n 1 --prompt-tokens 512 -b 512 -v 2>&1 | grep -E "profile:" | tail -n 1 | sed "s/^/prompt 512, fa on: /"
  # Time to first token: without the on-disk program cache (every kernel built), then with
  # it warm (llama-bench above filled it).
  POLYCL_PROGRAM_CACHE=0 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$m" --dev POLYCL0 --fa on -n 2 \
    --prompt-tokens 8 2>/dev/null | grep ttft | sed "s/^/polycl, no program cache: /"
  GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$m" --dev POLYCL0 --fa on -n 2 --prompt-tokens 8 \
    2>/dev/null | grep ttft | sed "s/^/polycl, warm program cache: /"
  [[ -f $BIN/libggml-cuda.so ]] && GGML_BACKEND_PATH=$BIN/libggml-cuda.so "$W/greedy" -m "$m" \
    --dev CUDA0 --fa on -n 2 --prompt-tokens 8 2>/dev/null | grep ttft | sed "s/^/CUDA: /"
}

twice() { # each decode kernel launched twice: the slowdown is its cost inside the chain
  local k
  for k in none kernel_mul_mv_group_rope_q4_0 kernel_fa_vec_d128 kernel_mul_mv_norm_q4_0 kernel_mul_mv_glu_q4_0 \
    kernel_mul_mv_q4_0 kernel_fused_rms_norm_wide none; do
    echo "== POLYCL_PROFILE_TWICE=$k"
    # "x" names no kernel: the baseline pays the same name check per launch.
    POLYCL_PROFILE_TWICE=${k/none/x} GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/llama-bench" -m "$W/m7-q4_0.gguf" \
      -dev POLYCL0 -ngl 99 -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E "tg128|error"
  done
}

ab_models() { # the AB_MODELS files, made where missing (name m<preset>-<type>, preset 7 -> 7b)
  local m preset
  for m in $AB_MODELS; do
    preset=${m%%-*} preset=${preset#m}
    [[ $preset =~ ^[0-9]+$ ]] && preset=${preset}b
    make_model "$W/$m.gguf" "$preset" "${m#*-}" &
  done
  wait
}

tg_fa1() { # model name, then VAR=value assignments: tg128 fa1 t/s of polycl ($LIB unless set)
  local m=$1
  shift
  env GGML_BACKEND_PATH=$LIB "$@" timeout 300 "$BIN/llama-bench" -m "$W/$m.gguf" -dev POLYCL0 -ngl 99 \
    -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E "tg128|error" | awk -F'|' '{print $(NF-1)}' | tr -s ' '
}

ab_run() { # a measure (tg_fa1 or tg_depth): POLYCL_LIB_OLD against $LIB, alternating, so drift
  # between runs shows as spread
  local measure=$1 m side
  local old=${POLYCL_LIB_OLD:?stage=$stage needs POLYCL_LIB_OLD, the build to compare against}
  for side in OLD NEW OLD NEW; do
    for m in $AB_MODELS; do
      if [[ $side == OLD ]]; then echo "== $m OLD $("$measure" "$m" GGML_BACKEND_PATH="$old")"
      else echo "== $m NEW $("$measure" "$m")"; fi
    done
  done
}

ab() { ab_run tg_fa1; }

tg_depth() { # model, then VAR=value assignments: tg64 fa1 t/s of polycl after each of DEPTHS
  # cached positions, one rep each (a depth's prompt takes longer than its tokens)
  local m=$1
  shift
  env GGML_BACKEND_PATH=$LIB "$@" timeout 300 "$BIN/llama-bench" -m "$W/$m.gguf" -dev POLYCL0 -ngl 99 \
    -fa 1 -p 0 -n 64 -d "${DEPTHS:-0,4096,16384}" -r 1 2>&1 |
    awk -F'|' '/tg64|error/ {printf "%s:%s ", $(NF - 2), $(NF - 1)} END {print ""}' | tr -s ' '
}

abdepth() { ab_run tg_depth; }

span() { # polycl alone: where a decode token goes (POLYCL_PROFILE=span, docs/perf.md step 42),
  # medians over llama-bench tg128 fa1 -r 2 of each AB_MODELS model ($LIB; VAR=value arguments
  # passed on)
  local m
  for m in $AB_MODELS; do
    env GGML_BACKEND_PATH=$LIB POLYCL_PROFILE=span "$@" timeout 300 "$BIN/llama-bench" -m "$W/$m.gguf" \
      -dev POLYCL0 -ngl 99 -fa 1 -p 0 -n 128 -r 2 -v > "$W/span-$m.log" 2>&1
    echo "== $m $* t/s $(grep tg128 "$W/span-$m.log" | awk -F'|' '{print $(NF-1)}' | tr -s ' ')"
    python3 - "$W/span-$m.log" <<'PY'
import collections, re, statistics as st, sys
FIELDS = [
    ("host enqueue", r"enqueued in ([\d.]+) us"),
    ("first kernel wait", r"first kernel started ([\d.]+) us"),
    ("GPU span", r"GPU span ([\d.]+) us"),
    ("GPU idle before", r"GPU idle ([\d.]+) us"),
    ("first wait back", r"returned (-?[\d.]+) us \(first\)"),
    ("last wait back", r"and (-?[\d.]+) us \(last\)"),
    ("-> graph compute", r"then ([\d.]+) us to the graph"),
    ("-> first enqueue", r"and ([\d.]+) us to its first"),
    ("set_tensor us", r"set_tensor \d+ in ([\d.]+) us"),
    ("get_tensor us", r"get_tensor \d+ in ([\d.]+) us"),
    ("synchronize us", r"synchronize \d+ in ([\d.]+) us"),
    ("get_tensor_async us", r"get_tensor_async \d+ in ([\d.]+) us"),
    ("graph_optimize us", r"graph_optimize \d+ in ([\d.]+) us"),
]
rows = [(m.group(1), l) for l in open(sys.argv[1], errors="replace")
        if (m := re.search(r"span: (\d+) launches", l)) and "GPU idle" in l]
if not rows:
    sys.exit("no span lines")
n = collections.Counter(k for k, _ in rows).most_common(1)[0][0]
d = [l for k, l in rows if k == n]
for name, rx in FIELDS:
    v = sorted(float(m.group(1)) for l in d if (m := re.search(rx, l)))
    if v:
        print("  %-18s p50 %8.1f   p10 %8.1f   p90 %8.1f" % (name, st.median(v), v[len(v) // 10], v[len(v) * 9 // 10]))
print("  %d computes of %s launches" % (len(d), n))
PY
  done
}

groups() { # polycl alone: each decode launch's work-groups on the GPU's clock (POLYCL_PROFILE=groups,
  # docs/perf.md step 64) for each AB_MODELS model ($LIB; VAR=value arguments passed on): the last
  # compute of llama-bench tg16 fa1, its sums by kernel and its first launches one by one
  local m
  for m in $AB_MODELS; do
    echo "== $m $*"
    env GGML_BACKEND_PATH=$LIB POLYCL_PROFILE=groups POLYCL_LOG=1 "$@" timeout 300 "$BIN/llama-bench" \
      -m "$W/$m.gguf" -dev POLYCL0 -ngl 99 -fa 1 -p 0 -n 16 -r 1 -v 2>&1 |
      grep -E "groups:|no group trace|rror" | tail -n 13 | sed 's/^.*groups: //'
  done
}

sweep() { # SWEEP_VAR over SWEEP_VALUES on $LIB, the whole list twice, measured by SWEEP_MEASURE
  # (tg_fa1, default, or tg_depth: tg64 after each of DEPTHS cached positions)
  local var=${SWEEP_VAR:?stage=sweep needs SWEEP_VAR} measure=${SWEEP_MEASURE:-tg_fa1} m v round
  for round in 1 2; do
    for v in ${SWEEP_VALUES:?stage=sweep needs SWEEP_VALUES}; do
      for m in $AB_MODELS; do
        echo "== $m $var=$v $("$measure" "$m" "$var=$v")"
      done
    done
  done
}

tiles() { # prompt speed per tensor-core tile shape (docs/perf.md step 16)
  local m t
  for m in m7-q4_0 m7-q8_0 m1-q4_0; do
    for t in 2,2,2,4,4 2,2,4,4,4 2,2,2,8,4 2,4,4,4,2 4,1,2,8,4; do
      echo "== $m POLYCL_MMA_TILE=$t"
      POLYCL_MMA_TILE=$t GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/llama-bench" -m "$W/$m.gguf" -dev POLYCL0 \
        -ngl 99 -fa 1 -p 512 -n 0 -r 2 2>&1 | grep -E "pp512|error"
    done
  done
}

cached_ptx() { # runs "$@" FILE on each PTX program in polycl's program cache (NVIDIA's
  # binaries are PTX), FILE a NUL-free copy of it; PTXAS names ptxas meanwhile
  local f PTXAS
  PTXAS=$(command -v ptxas || ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -n 1)
  [[ -n $PTXAS ]] || { echo "${FUNCNAME[1]}: no ptxas (the CUDA toolkit) on this machine"; return 1; }
  for f in "${POLYCL_PROGRAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/polycl}"/*.bin; do
    head -c 4096 "$f" | grep -q '^\.target' || continue
    tr -d '\000' < "$f" > "$W/cached.ptx"
    "$@" "$W/cached.ptx"
  done
}

regs() { # registers a work-item of every kernel in polycl's program cache, from ptxas -v:
  # run polycl first so that the programs of interest are built and cached
  cached_ptx regs_of | sort -u
}
regs_of() { # FILE: the registers of each kernel in a PTX file
  # The count follows its function's "properties for" line; a function with no count of
  # its own (a non-inlined callee) only renames the next one.
  "$PTXAS" -arch=sm_90 -v "$1" -o /dev/null 2>&1 |
    awk '/Function properties for/ {f = $NF} /Used [0-9]+ registers/ {print f, $5}'
}

loops() { # the dp4a loops of kernels (names as arguments) in polycl's program cache, in the
  # driver's own code: each cached PTX that holds one, assembled by ptxas for sm_90, read by
  # scripts/sass-loops.py (instructions an iteration); run polycl first, as for regs
  export CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -n 1)}
  cached_ptx loops_of "$@" | sort -u
}
loops_of() { # KERNEL... FILE: loops_of's kernels in a PTX file that holds any of them
  local file=${!#} k
  for k in "${@:1:$#-1}"; do
    grep -q "\.entry $k(" "$file" || continue
    "$PTXAS" -arch=sm_90 "$file" -o "$W/cached.cubin" &&
      python3 scripts/sass-loops.py "$W/cached.cubin" "${@:1:$#-1}"
    return
  done
}

trial() { # TRIAL_VARS, each setting off and on: correctness, then speed. An entry is VAR (off 0,
  # on 1) or VAR=OFF/ON (POLYCL_MVN_SPLIT=1/2)
  local e var off on entries=${TRIAL_VARS:?stage=trial needs TRIAL_VARS}
  for e in $entries; do
    read -r var off on <<<"$(trial_entry "$e")"
    env "$var=$on" GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/test-backend-ops" -b POLYCL0 -o MUL_MAT 2>&1 |
      grep -E "tests passed|FAIL" | head -n 5 | sed "s/^/MUL_MAT $var=$on: /"
  done
  trial_greedy $entries
  for e in $entries; do
    read -r var off on <<<"$(trial_entry "$e")"
    SWEEP_VAR=$var SWEEP_VALUES="$off $on" sweep | tee "$W/trial-sweep.txt"
    trial_summary "$var" "$off" "$on" < "$W/trial-sweep.txt"
  done
  trial_profile $entries
  # Every build the runs above cached: the default's and each setting's kernels.
  regs | grep -E "mul_mv|group_rope"
  loops kernel_mul_mv_group_rope_q4_0 kernel_mul_mv_group_rope_q8_0 kernel_mul_mv_glu_q4_0 \
    kernel_mul_mv_glu_q8_0 kernel_mul_mv_norm_q4_0 kernel_mul_mv_norm_q8_0 kernel_mul_mv_norm2_q8_0 \
    kernel_mul_mv_glu_q4_k kernel_mul_mv_norm_q6_k
}

trial_entry() { # ENTRY: "VAR OFF ON" of a TRIAL_VARS entry
  if [[ $1 == *=*/* ]]; then
    local vals=${1#*=}
    echo "${1%%=*} ${vals%/*} ${vals#*/}"
  else
    echo "$1 0 1"
  fi
}

trial_summary() { # VAR OFF ON, a sweep's lines on stdin: each model's mean t/s off and on, and
  # their ratio
  awk -v var="$1" -v off="$1=$2" -v on="$1=$3" '$1 == "==" && ($3 == off || $3 == on) && $4 + 0 > 0 {
      s[$2 " " $3] += $4; n[$2 " " $3]++; models[$2] = 1 }
    END { for (m in models) { if (!n[m " " off] || !n[m " " on]) continue
      a = s[m " " off] / n[m " " off]; b = s[m " " on] / n[m " " on]
      printf "trial %s %s: %.2f -> %.2f t/s, %.3fx (means of %d and %d runs)\n", m, var, a, b, b / a,
        n[m " " off], n[m " " on] } }'
}

trial_greedy() { # ENTRY...: each setting's greedy tokens against the default's on the small test
  # models (target/gpu/models) and the centered 1B Q4_0, fa on and off: the fused decode kernels
  # that MUL_MAT never launches, and NVIDIA's own paths that PoCL never takes. A setting that
  # keeps the default's sums must keep its tokens; the centered 1B's part at any rounding that
  # differs (session 39: the staged rows', at the 7th token). The CPU backend's tokens are printed
  # beside, not compared: they may differ where two logits nearly tie, as the Q8_1 activations
  # round otherwise
  local m fa e var off on ref got cpu GREEDY_N=16 GREEDY_PROMPT=24
  host_greedy || return
  make_model "$M1C" 1b q4_0 --centered
  for m in target/gpu/models/*.gguf "$M1C"; do
    [[ -f $m ]] || continue
    for fa in on off; do
      cpu=$(greedy_tokens none "$m" $fa)
      ref=$(greedy_tokens POLYCL0 "$m" $fa)
      echo "greedy $(basename "$m") fa=$fa default: $ref$([[ $ref == "$cpu" ]] && echo " (the CPU's)" || echo " (CPU: ${cpu#tokens: })")"
      for e in "$@"; do
        read -r var off on <<<"$(trial_entry "$e")"
        got=$(greedy_tokens POLYCL0 "$m" $fa "$var=$on")
        if [[ -n $ref && $ref == "$got" ]]; then echo "  $var=$on: the same"
        else echo "  $var=$on: DIFFERENT: $got"; fi
      done
    done
  done
}

trial_profile() { # ENTRY...: a decode step's device time by kernel (POLYCL_PROFILE=1, the last of 8
  # tokens, fa on) with each setting off and on, on each AB_MODELS model: which kernels a setting
  # speeds up or slows down, where tg128 gives only the sum
  local m e var off on s
  [[ -x $W/greedy ]] || host_greedy || return
  for m in $AB_MODELS; do
    for e in "$@"; do
      read -r var off on <<<"$(trial_entry "$e")"
      for s in "$off" "$on"; do
        env "$var=$s" POLYCL_PROFILE=1 GGML_BACKEND_PATH=$LIB timeout 120 "$W/greedy" -m "$W/$m.gguf" \
          --dev POLYCL0 --fa on -n 8 --prompt-tokens 8 -b 16 -v 2>&1 | grep -E "profile:" | tail -n 1 |
          sed "s/^.*profile: /$m $var=$s: /"
      done
    done
  done
}

backend_ops() { # polycl's GPU kernels against ggml's CPU backend on the GPU machine
  local op
  for op in MUL_MAT FLASH_ATTN_EXT ROPE SET_ROWS RMS_NORM; do
    GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/test-backend-ops" -b POLYCL0 -o $op 2>&1 | grep -E "tests passed|FAIL" |
      head -n 5 | sed "s/^/$op: /"
  done
}

fa_check() { # polycl's flash-attention kernels on this GPU against ggml's CPU backend: ctest's
  # per-head masks (each kernel family, which the plan log must name) and test-backend-ops
  # FLASH_ATTN_EXT under each of FA_ENVS ('|'-separated lists of VAR=value; default: the plan's
  # own choice, then the long-cache kernels in place of the tensor-core GQA one from 512
  # positions, 4, 2 and 1 (the default) query heads a group, then the cols kernel in place of
  # the long-cache one from 512 positions, POLYCL_FA_COLS_KV=512), each restricted to the cases
  # FA_PATTERN matches (test-backend-ops -p; default all)
  local e log=$W/fa-ops.log
  vendor_src
  mkdir -p "$W/prefix/build" "$W/prefix/src"
  ln -sfn "$BIN" "$W/prefix/build/bin"
  ln -sfn "$W/vendor" "$W/prefix/src/vendor"
  { cmake -S ctest -B "$W/ctest" -DCMAKE_BUILD_TYPE=Release -DPOLYCL_LIB="$LIB" -DGGML_PREFIX="$W/prefix" \
      -DPOLYCL_GENERATED_HEADER="$PWD/include/polycl.h" &&
    cmake --build "$W/ctest" -j "$(nproc)" --target fa_head_masks_vs_cpu graph_vs_cpu; } > "$W/ctest.log" 2>&1 ||
    { tail -n 20 "$W/ctest.log"; return 1; }
  (cd "$W/ctest" && ctest -R 'fa_head_masks|graph_on_polycl0' --output-on-failure 2>&1 |
    grep -E 'Test +#|tests passed|FAIL|NMSE|missing' | head -n 40)
  local long="POLYCL_FA_GQA_MIN_KV=2147483647 POLYCL_FA_LONG_KV=512"
  IFS='|' read -ra envs <<< "${FA_ENVS:- |$long POLYCL_FA_LONG_HEADS=4|$long POLYCL_FA_LONG_HEADS=2|$long|POLYCL_FA_COLS_KV=512}"
  for e in "${envs[@]}"; do
    # shellcheck disable=SC2086 # e is a list of assignments
    env GGML_BACKEND_PATH="$LIB" POLYCL_LOG=1 $e timeout 300 "$BIN/test-backend-ops" -b POLYCL0 \
      -o FLASH_ATTN_EXT ${FA_PATTERN:+-p "$FA_PATTERN"} > "$log" 2>&1
    echo "FLASH_ATTN_EXT [${e# }]: $(grep -E '^ *[0-9]+/[0-9]+ tests passed' "$log" | tail -n 1 | sed 's/^ *//')" \
      "$(grep -c FAIL "$log") FAIL lines; kernels:" \
      "$(grep -oE 'kernel_fa_[a-z0-9_]+' "$log" | sort | uniq -c | awk '{printf "%s %s, ", $2, $1}')"
    grep -E 'FAIL' "$log" | head -n 5
  done
}

case ${stage:-bench} in
  build) time build; tail -3 "$W/build.log" ;;
  status) tail -3 "$W/build.log" 2>/dev/null ;;
  greedy) greedy_check ;;
  quick) # build and the 7B Q4_0 figures only, in one command
    build; tail -1 "$W/build.log"
    python3 scripts/make-model-raw.py "$W/m7-q4_0.gguf" --preset 7b --type q4_0
    bench_one "$W/m7-q4_0.gguf" 7b-q4_0
    greedy_check ;;
  models) models ;;
  quickprofile) # polycl alone, host without CUDA: build, 7B Q4_0 model, profile
    build & python3 scripts/make-model-raw.py "$W/m7-q4_0.gguf" --preset 7b --type q4_0; wait
    tail -1 "$W/build.log"; profile ;;
  all) # everything, for one long session: build and models side by side, then measure
    build & models; wait; tail -1 "$W/build.log"
    profile; bench_one "$W/m7-q4_0.gguf" 7b-q4_0; bench_one "$W/m7-q8_0.gguf" 7b-q8_0
    bench_one "$W/m1-q4_0.gguf" 1b-q4_0; bench_one "$W/m7-q4_k.gguf" 7b-q4_k
    bench_one "$W/m7-q4_k_m.gguf" 7b-q4_k_m; greedy_check
    backend_ops ;;
  profile) models; profile ;;
  twice) build & models; wait; tail -1 "$W/build.log"; twice ;;
  regs) regs ;;
  fa) fa_check ;;
  tiles) build & models; wait; tail -1 "$W/build.log"; tiles ;;
  probe)
    : "${PROBE:?stage=probe needs PROBE, a file name in scripts/probe without .c or .cu}"
    if [[ -f scripts/probe/$PROBE.cu ]]; then # a CUDA peer of an OpenCL probe
      "${NVCC:-/usr/local/cuda/bin/nvcc}" -O2 -arch=sm_90 "scripts/probe/$PROBE.cu" -o "$W/$PROBE"
    else
      cc -O2 "scripts/probe/$PROBE.c" -o "$W/$PROBE" -I/tmp/o/usr/include \
        -L/tmp/o/usr/lib/x86_64-linux-gnu -lOpenCL -lm
    fi && "$W/$PROBE" ${PROBE_ARGS:-} ;;
  ab | abdepth | sweep | span | groups) # the host built where missing, beside the models
    host_ready || build & ab_models; wait; tail -1 "$W/build.log" 2>/dev/null; "$stage" ;;
  trial)
    AB_MODELS=${TRIAL_MODELS:-m7-q4_0 m7-q8_0 m1-q4_0 m7-q4_k_m}
    host_ready || build & ab_models; wait; tail -1 "$W/build.log" 2>/dev/null; trial ;;
  step) # polycl alone, host without CUDA: the step kernel off and on, and MUL_MAT against the CPU
    build & models; wait; tail -1 "$W/build.log"; step_check
    GGML_BACKEND_PATH=$LIB timeout 300 "$BIN/test-backend-ops" -b POLYCL0 -o MUL_MAT 2>&1 |
      grep -E "tests passed|FAIL" | head -n 5 | sed "s/^/MUL_MAT: /" ;;
  depth) # the CUDA host built where missing, beside the models
    depth_setup
    # The 7B at depth once used a whole 600 s call without a figure
    # (docs/perf.md step 39): each run is bounded, and timestamps say where
    # the time went.
    for m in ${DEPTH_MODELS:-m1-q4_0 m7-q4_0}; do
      date
      CUDA_TIMEOUT=${DEPTH_TIMEOUT:-150} POLYCL_TIMEOUT=${DEPTH_TIMEOUT:-150} bench_one "$W/$m.gguf" \
        "depth-$m" -fa 1 -p 0 -n 128 -d "${DEPTHS:-0,4096,16384}"
    done
    date ;;
  depthprof) # polycl alone: how long a DEPTH-token prompt (default 4096) takes, and the GPU time
    # per kernel of a decode step after it, 1B then 7B Q4_0 (DEPTH_MODELS; docs/perf.md step 39)
    depth_setup
    host_greedy
    for m in ${DEPTH_MODELS:-m1-q4_0 m7-q4_0}; do
      echo "== $m, $(date)"
      POLYCL_PROFILE=1 GGML_BACKEND_PATH=$LIB timeout "${DEPTH_TIMEOUT:-150}" "$W/greedy" -m "$W/$m.gguf" \
        --dev POLYCL0 --fa on -n 4 --prompt-tokens "${DEPTH:-4096}" -b 512 -v 2>&1 |
        grep -E "profile:|ttft|rror" | tail -n 3
    done
    date ;;
  one) # bench_one on BENCH_MODELS (names as AB_MODELS'), made where missing, with BENCH_FLAGS
    # (llama-bench's test flags, default bench_one's); the CUDA host built first where missing
    AB_MODELS=${BENCH_MODELS:?stage=one needs BENCH_MODELS}
    host_ready || build & ab_models; wait
    for m in $AB_MODELS; do bench_one "$W/$m.gguf" "$m" ${BENCH_FLAGS:-}; done ;;
  bench | closing) # closing: the CUDA host built beside the models first
    if [[ ${stage:-bench} == closing ]]; then build & models; wait; tail -1 "$W/build.log"; else models; fi
    bench_one "$W/m7-q4_0.gguf" 7b-q4_0
    bench_one "$W/m7-q8_0.gguf" 7b-q8_0
    bench_one "$W/m1-q4_0.gguf" 1b-q4_0
    bench_one "$W/m7-q4_k.gguf" 7b-q4_k
    bench_one "$W/m7-q4_k_m.gguf" 7b-q4_k_m
    greedy_check ;;
esac
