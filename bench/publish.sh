#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/publish.sh — publishing a strata image as an OCI image, next to the
# OCI tools people use for the same root file system:
#
#   strata publish --oci (gzip)   the image to a fresh OCI layout, tar+gzip layers
#   strata publish --oci --zstd   the same, tar+zstd layers
#   umoci repack                  the same root (strata export of the image) repacked
#                                 into a layout as one tar+gzip layer (only the
#                                 repack is timed, not the unpack that prepares it)
#   skopeo copy                   umoci's image, layout to layout (blob copy)
#   strata publish --registry     to a local docker-registry: first push, then a
#                                 re-push with nothing missing (bytes uploaded)
#
# The image is one cell of recipes/debian-pytorch.yaml (scipy=no: ~500 Debian
# packages, a 1.4 GiB root in two layers), built into the bench store if it is
# not there yet (BENCH_IMAGE=NAME:TAG and BENCH_STORE to use another image).
# Before each timed strata publish the store's record of earlier blobs
# (STORE/oci/) is removed, so every layer is really made.
#
# Environment:
#   BENCH_WORK        work dir, default /var/tmp/strata-bench-publish
#   BENCH_STORE       store, default $BENCH_WORK/store
#   STRATA            strata binary; default build-bench/ in the repo (release build)
#   STRATA_FIXTURES   .deb cache, default /var/cache/strata-fixtures
# Needs root, skopeo, umoci, docker-registry. Figures go to
# $BENCH_WORK/results.txt and stdout.
set -euo pipefail
export LC_ALL=C
prog=bench/publish.sh
die() { printf '\n%s: FAILED: %s\n' "$prog" "$*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*" >&2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(dirname "$here")
work=${BENCH_WORK:-/var/tmp/strata-bench-publish}
store=${BENCH_STORE:-$work/store}
image=${BENCH_IMAGE:-debian-pytorch:1.13-scipy-no}
export STRATA_FIXTURES=${STRATA_FIXTURES:-/var/cache/strata-fixtures}
[ "$(id -u)" -eq 0 ] || die "needs root"
for t in skopeo umoci docker-registry python3; do
  command -v $t >/dev/null || die "$t is not installed (scripts/install-deps.sh)"
done
if [ -z "${STRATA:-}" ]; then
  if [ ! -f "$repo/build-bench/build.ninja" ]; then
    meson setup "$repo/build-bench" "$repo" --buildtype=release -Dtests=false >&2
  fi
  ninja -C "$repo/build-bench" >&2
  STRATA=$repo/build-bench/cli/strata
fi
mkdir -p "$work"
out=$work/results.txt
: >"$out"
say() { printf '%s\n' "$*" | tee -a "$out"; }
# seconds TIME_FILE CMD...: runs CMD, records its wall time
timed() {
  local f=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.2f}')" >"$f"
}
blobs_size() { du -sb "$1/blobs" | cut -f1; }

S() { "$STRATA" --store "$store" "$@"; }
if ! S inspect "$image" >/dev/null 2>&1; then
  step "building $image (recipes/debian-pytorch.yaml, cell scipy=no)"
  "$repo/tests/fixtures/fetch-pytorch-debs.sh" >&2
  S build --cell scipy=no "$repo/recipes/debian-pytorch.yaml" >&2
fi
S inspect "$image" | sed -n '1,12p' >&2
rm -rf "$work/root" "$work/lay-gz" "$work/lay-zst" "$work/umoci" "$work/bundle" "$work/skopeo"
step "export the root file system"
S -q export "$image" "$work/root"
root_bytes=$(du -sb "$work/root" | cut -f1)

sync
step "strata publish --oci (tar+gzip)"
rm -rf "$store/oci"
timed "$work/t.gz" S -q publish "$image" --oci "$work/lay-gz:bench"
step "strata publish --oci --zstd"
rm -rf "$store/oci"
timed "$work/t.zst" S -q publish "$image" --oci "$work/lay-zst:bench" --zstd

step "umoci repack of the same root"
umoci init --layout "$work/umoci"
umoci new --image "$work/umoci:bench"
umoci unpack --image "$work/umoci:bench" "$work/bundle"
rmdir "$work/bundle/rootfs" 2>/dev/null || rm -rf "$work/bundle/rootfs"
cp -a "$work/root" "$work/bundle/rootfs"
sync
timed "$work/t.umoci" umoci repack --image "$work/umoci:bench" "$work/bundle"
step "skopeo copy of umoci's image (layout to layout)"
timed "$work/t.skopeo" skopeo copy -q "oci:$work/umoci:bench" "oci:$work/skopeo:bench"

step "registry push: first, then again with nothing missing"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -rf "$work/registry"
mkdir -p "$work/registry"
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
  "$work/registry" "$port" >"$work/registry.yml"
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
reg=$!
trap 'kill $reg 2>/dev/null || true' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
timed "$work/t.push1" S publish "$image" --registry "127.0.0.1:$port/bench/img:1" --insecure 2>"$work/push1.err"
timed "$work/t.push2" S publish "$image" --registry "127.0.0.1:$port/bench/img:1" --insecure 2>"$work/push2.err"
kill $reg 2>/dev/null || true

say "image $image, root $root_bytes bytes ($(find "$work/root" | wc -l) entries); commit $(git -C "$repo" rev-parse --short HEAD)"
say "$(printf '%-40s %10s %14s' 'what' 'seconds' 'bytes')"
say "$(printf '%-40s %10s %14s' 'strata publish --oci (tar+gzip)' "$(cat "$work/t.gz")" "$(blobs_size "$work/lay-gz")")"
say "$(printf '%-40s %10s %14s' 'strata publish --oci --zstd (tar+zstd)' "$(cat "$work/t.zst")" "$(blobs_size "$work/lay-zst")")"
say "$(printf '%-40s %10s %14s' 'umoci repack (tar+gzip)' "$(cat "$work/t.umoci")" "$(blobs_size "$work/umoci")")"
say "$(printf '%-40s %10s %14s' 'skopeo copy oci: -> oci:' "$(cat "$work/t.skopeo")" "$(blobs_size "$work/skopeo")")"
say "$(printf '%-40s %10s' 'strata publish --registry (first)' "$(cat "$work/t.push1")")  $(tail -n 1 "$work/push1.err")"
say "$(printf '%-40s %10s' 'strata publish --registry (again)' "$(cat "$work/t.push2")")  $(tail -n 1 "$work/push2.err")"
