#!/usr/bin/env bash
# Reliability checks that need more than `cargo test` and the plain ctest run
# (issue 6), each bounded in time for CI's 2-core machine:
#   1. threads: tests/reliability_threads.rs again on two PoCL devices
#      (POCL_DEVICES="pthread pthread"), repeated POLYCL_THREAD_RUNS times;
#   2. AddressSanitizer + LeakSanitizer: every ctest C program built with
#      -fsanitize=address (the Rust library is not instrumented, but its heap
#      goes through ASan's malloc, so LeakSanitizer sees its leaks too);
#   3. valgrind memcheck on ctest/reliability/capi_small.c, zero errors;
#   4. cargo-fuzz: each target in fuzz/ for FUZZ_SECONDS (default 60) from its
#      committed corpus fuzz/corpus/<target>.
# Options: --update-corpus merges what the fuzz runs found into fuzz/corpus;
# --only STAGE runs one of threads|asan|valgrind|fuzz.
# Needs the plugin built and installed (scripts/test.sh stage 5, or it builds it).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$POLYCL_ROOT"

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
UPDATE_CORPUS=0
ONLY=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --update-corpus) UPDATE_CORPUS=1 ;;
    --only) ONLY=$2; shift ;;
    *) die "unknown option $1" ;;
  esac
  shift
done
want() { [[ -z "$ONLY" || "$ONLY" == "$1" ]]; }
SUMMARY=()
START=$(date +%s)

[[ -n "${POLYCL_GENERATED_HEADER:-}" && -f "$POLYCL_LIB" ]] || build_polycl
ensure_host

# The ctest tree, configured into $1 with extra C flags $2.
ctest_build() {
  local dir=$1 flags=$2
  cmake -S ctest -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
    -DPOLYCL_LIB="$POLYCL_LIB" -DGGML_PREFIX="$HOST_PREFIX" \
    -DPOLYCL_GENERATED_HEADER="$POLYCL_GENERATED_HEADER" >/dev/null
  cmake --build "$dir" -j "$(nproc)" >/dev/null
}

if want threads; then
  stage "reliability 1/4: threads on two devices"
  POCL_DEVICES="pthread pthread" POLYCL_THREAD_RUNS=${POLYCL_THREAD_RUNS:-25} \
    cargo test --release --test reliability_threads
  SUMMARY+=("threads: tests/reliability_threads.rs on 2 devices, ${POLYCL_THREAD_RUNS:-25} runs each: ok")
fi

if want asan; then
  stage "reliability 2/4: ctest under AddressSanitizer + LeakSanitizer"
  ASAN_DIR="$POLYCL_ROOT/target/ctest-asan"
  ctest_build "$ASAN_DIR" "-fsanitize=address -fno-omit-frame-pointer"
  # The plugin is dlopen'ed by uninstrumented ggml code: ASan must not insist
  # on being first in the library list, and it must report leaks at exit.
  # intercept_tls_get_addr=0: GCC 12's runtime guesses a dynamic TLS block's
  # bounds from the 16 bytes before it when the block starts 16 bytes into a
  # page; for a block from ASan's malloc those are ASan's chunk header, and
  # LeakSanitizer's tracer then scans from address ~0x150 and segfaults at
  # exit ("Tracer caught signal 11: addr=0x150" in ScanRangeForPointers; what
  # failed CI on 59ada17 and 475abe2 in reliability_capi_small, whose block
  # lands there on CI's machine). glibc takes those blocks from malloc and
  # keeps them in the thread's DTV, itself reached from the thread's TLS, so
  # LeakSanitizer still scans them as heap without the interceptor.
  ASAN_OPTIONS="detect_leaks=1:verify_asan_link_order=0:detect_odr_violation=0:intercept_tls_get_addr=0" \
    LSAN_OPTIONS="suppressions=$POLYCL_ROOT/ctest/sanitize/lsan.supp:print_suppressions=0" \
    ctest --test-dir "$ASAN_DIR" -j "$(nproc)" --output-on-failure ||
    die "ctest under ASan/LSan failed (log above)"
  n=$(ctest --test-dir "$ASAN_DIR" -N | sed -n 's/^Total Tests: //p')
  SUMMARY+=("asan+lsan: $n ctest programs, 0 errors, 0 leaks")
fi

if want valgrind; then
  stage "reliability 3/4: valgrind memcheck on capi_small"
  if ! command -v valgrind >/dev/null; then
    log "apt-get install valgrind"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
  fi
  CTEST_DIR="$POLYCL_ROOT/target/ctest-valgrind"
  ctest_build "$CTEST_DIR" ""
  # Under valgrind PoCL sees another CPU (no AVX-512), so it compiles its
  # kernels again; separate caches keep those for the next valgrind run.
  VG_CACHE="$POLYCL_ROOT/target/valgrind-cache"
  mkdir -p "$VG_CACHE/pocl"
  log=$(mktemp)
  if ! POCL_CACHE_DIR="$VG_CACHE/pocl" POLYCL_PROGRAM_CACHE="$VG_CACHE/polycl" \
    valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --num-callers=40 --suppressions="$POLYCL_ROOT/ctest/sanitize/valgrind.supp" \
    "$CTEST_DIR/reliability/reliability_capi_small" 3 2>"$log"; then
    cat "$log" >&2
    die "valgrind memcheck found errors (log above)"
  fi
  grep -E "ERROR SUMMARY|definitely lost" "$log"
  SUMMARY+=("valgrind: $(grep -o 'ERROR SUMMARY: [0-9]* errors[^)]*)' "$log" | head -1)")
  rm -f "$log"
fi

if want fuzz; then
  stage "reliability 4/4: cargo-fuzz, ${FUZZ_SECONDS} s per target"
  # cargo-fuzz needs nightly flags (-Z sanitizer, sancov passes): the stable
  # toolchain accepts them with RUSTC_BOOTSTRAP=1, which cargo-fuzz's own
  # build of the targets gets from the environment.
  if ! cargo fuzz --version >/dev/null 2>&1; then
    log "cargo install cargo-fuzz (from crates.io)"
    cargo install --locked cargo-fuzz >&2
  fi
  export RUSTC_BOOTSTRAP=1
  (cd fuzz && cargo fuzz build -O)
  FUZZ_BIN="$POLYCL_ROOT/fuzz/target/x86_64-unknown-linux-gnu/release"
  [[ -n "${CARGO_TARGET_DIR:-}" ]] && FUZZ_BIN="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"
  for t in $(cd fuzz && cargo fuzz list); do
    corpus="$POLYCL_ROOT/fuzz/corpus/$t"
    mkdir -p "$corpus"
    new=$(mktemp -d)
    out=$(mktemp)
    # New inputs go to $new (first dir); the committed corpus is read only.
    if ! "$FUZZ_BIN/$t" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout=20 \
      -artifact_prefix="$POLYCL_ROOT/target/fuzz-$t-" "$new" "$corpus" >"$out" 2>&1; then
      tail -n 60 "$out" >&2
      die "fuzz target $t failed; the input is in target/fuzz-$t-* (replay: $FUZZ_BIN/$t FILE)"
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out")
    grep -E "^#[0-9]+ +DONE" "$out" || true
    if [[ $UPDATE_CORPUS == 1 ]]; then
      "$FUZZ_BIN/$t" -merge=1 "$corpus" "$new" >/dev/null 2>&1
      log "$t: corpus now $(ls "$corpus" | wc -l) inputs"
    fi
    SUMMARY+=("fuzz $t: $execs executions in ${FUZZ_SECONDS} s, $(ls "$corpus" | wc -l) corpus inputs, no crash")
    rm -rf "$new" "$out"
  done
fi

stage "reliability summary ($(($(date +%s) - START)) s)"
printf '%s\n' "${SUMMARY[@]}"
