#!/usr/bin/env bash
# PoCL 5.0, the OpenCL CPU device of Ubuntu 24.04 (and of the GPU machine's image). Its kernel
# compiler aborts the whole host process on barrier shapes that PoCL 3.1 (Debian 12: the rest of
# this suite) and 6.0 (Debian 13) build: the portable attention kernel did (docs/perf.md step
# 82, pocl PR 2281). So polycl's flash attention cases of test-backend-ops and a greedy decode
# of the test model against the CPU backend run under PoCL 5.0 in an Ubuntu 24.04 chroot,
# made once under $POLYCL_CACHE. Its packages come from archive.ubuntu.com, checked against
# Ubuntu's archive key, itself checked by its pinned hash. Needs root (debootstrap, chroot,
# /proc and /sys mounted into the chroot).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MIRROR=http://archive.ubuntu.com/ubuntu
KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb
KEYRING_DEB_SHA256=36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8
ROOT="$POLYCL_CACHE/ubuntu-24.04-pocl-5.0"

[[ $(id -u) == 0 ]] || die "needs root (debootstrap and chroot)"
apt_ensure debootstrap curl
require_plugin
ensure_host
GREEDY=$(build_greedy)
MDIR=$(bash "$POLYCL_ROOT/scripts/models.sh" | tail -n 1)

if [[ ! -f "$ROOT/.ready" ]]; then
  stage "PoCL 5.0: an Ubuntu 24.04 chroot at $ROOT"
  tmp=$(mktemp -d)
  curl -fsS -o "$tmp/keyring.deb" "$MIRROR/$KEYRING_DEB" || die "could not fetch $MIRROR/$KEYRING_DEB"
  echo "$KEYRING_DEB_SHA256  $tmp/keyring.deb" | sha256sum -c --quiet - || die "ubuntu-keyring: wrong hash"
  dpkg -x "$tmp/keyring.deb" "$tmp/k"
  # Debian 12's debootstrap predates noble; every Ubuntu release since gutsy uses gutsy's script.
  scripts=/usr/share/debootstrap/scripts
  [[ -e $scripts/noble ]] || ln -s gutsy "$scripts/noble"
  rm -rf "$ROOT.tmp"
  debootstrap --variant=minbase --keyring="$tmp/k/usr/share/keyrings/ubuntu-archive-keyring.gpg" \
    noble "$ROOT.tmp" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -n 20 "$tmp/debootstrap.log" >&2; die "debootstrap noble failed"; }
  echo "deb $MIRROR noble main universe" >"$ROOT.tmp/etc/apt/sources.list"
  chroot "$ROOT.tmp" apt-get update -qq
  chroot "$ROOT.tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    pocl-opencl-icd ocl-icd-libopencl1 libgomp1 >/dev/null
  rm -rf "$tmp" "$ROOT" && mv "$ROOT.tmp" "$ROOT" && touch "$ROOT/.ready"
fi
version=$(chroot "$ROOT" dpkg-query -W -f='${Version}' pocl-opencl-icd)
[[ $version == 5.0* ]] || die "the chroot holds PoCL $version, not 5.0"

# The plugin, the host's build, the greedy binary (its rpath names the host's folder) and the
# test models at the same paths inside; /proc and /sys for PoCL's view of the CPU.
for p in "$POLYCL_LIB" "$HOST_BIN" "$GREEDY" "$MDIR"; do
  rm -rf "${ROOT:?}$p"
  mkdir -p "$(dirname "$ROOT$p")"
  cp -a "$p" "$ROOT$p"
done
cleanup() { umount "$ROOT/sys" "$ROOT/proc" 2>/dev/null || true; }
trap cleanup EXIT
for fs in proc:proc sys:sysfs; do
  dir=${fs%:*}
  mountpoint -q "$ROOT/$dir" || mount -t "${fs#*:}" "${fs#*:}" "$ROOT/$dir" || die "could not mount $dir in $ROOT"
done
# A fresh kernel cache: PoCL keeps built work-group functions by program, and a cached one
# would hide an abort.
rm -rf "$ROOT/root/.cache"
in_root() { chroot "$ROOT" env HOME=/root GGML_BACKEND_PATH="$POLYCL_LIB" "$@"; }

stage "PoCL $version: test-backend-ops FLASH_ATTN_EXT"
log_file=$(mktemp)
rc=0
in_root "$HOST_BIN/test-backend-ops" test -b POLYCL0 -o FLASH_ATTN_EXT >"$log_file" 2>&1 || rc=$?
grep -E 'Device description|^ *[0-9]+/[0-9]+ tests passed' "$log_file" || true
if [[ $rc != 0 ]] || ! tbo_all_passed "$(tbo_passed_line "$log_file")"; then
  grep -E 'FAIL|Assert|abort' "$log_file" | head -n 10 >&2 || true
  rm -f "$log_file"
  die "FLASH_ATTN_EXT under PoCL $version failed (rc $rc)"
fi
rm -f "$log_file"

stage "PoCL $version: greedy tokens of model-Q4_0 against the CPU backend"
for fa in on off; do
  args=(-m "$MDIR/model-Q4_0.gguf" --fa "$fa" --prompt-tokens 40 -b 16 -n 16 -t 1)
  cpu=$(in_root env -u GGML_BACKEND_PATH "$GREEDY" "${args[@]}" 2>&1 | grep '^tokens:') ||
    die "the CPU backend's decode failed in the chroot"
  ours=$(in_root "$GREEDY" --dev POLYCL0 "${args[@]}" 2>&1 | grep '^tokens:') ||
    die "polycl's decode under PoCL $version failed (fa $fa)"
  [[ $cpu == "$ours" ]] || die "fa $fa: polycl's tokens differ from the CPU backend's
  CPU    $cpu
  polycl $ours"
  echo "fa $fa: the same 16 tokens ($ours)"
done
echo "PoCL $version: passed"
