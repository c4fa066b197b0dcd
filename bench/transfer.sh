#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/transfer.sh — moves a real tree of a few hundred MB (Debian packages
# of the PyTorch stack, unpacked) over loopback three ways, once each:
#
#   strata pull          from `strata serve` into a fresh store
#   ostree pull          over HTTP from an archive-mode repo of the same tree,
#                        served by `python3 -m http.server` on 127.0.0.1
#   curl + zstd -d       of the tree's .tar.zst from the same HTTP server
#
# then re-pulls after the 1% change of bench/pack.sh (50 .so files +4 KiB,
# 240 .py files with one line changed, 5 new 1 MiB files) and compares the
# bytes the server sent with the compressed size of the chunks that are new
# in v2; last, 50 concurrent pulls of a small image (python3-numpy), with
# the server's peak RSS.
#
# Environment:
#   BENCH_WORK        work dir, default /var/tmp/strata-transfer (outside the repo)
#   BENCH_PACKAGES    package names (their .debs from the bench-pack set)
#   STRATA            strata binary; default build-bench/ (release), built here
#   STRATA_FIXTURES   .deb cache, default /var/cache/strata-fixtures
#   BENCH_STREAMS     parallel streams of strata pull, default 4
# Needs root (trees owned by root). Prints a table; figures go to
# $BENCH_WORK/results.txt.
set -euo pipefail
export LC_ALL=C
prog=bench/transfer.sh
die() { printf '\n%s: FAILED: %s\n' "$prog" "$*" >&2; exit 1; }
say() { printf '%s\n' "$*" >&2; }
step() { printf '\n== %s\n' "$*" >&2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(dirname "$here")
fixtures=${STRATA_FIXTURES:-/var/cache/strata-fixtures}
pkgs=${BENCH_PACKAGES:-"libtorch1.13 python3-torch python3-numpy python3-scipy python3-sympy"}
streams=${BENCH_STREAMS:-4}
work=${BENCH_WORK:-/var/tmp/strata-transfer}
[[ $work == /* && $work != / ]] || die "BENCH_WORK must be an absolute path other than /"
case "$work/" in "$repo"/*) die "BENCH_WORK must be outside the repository" ;; esac
[[ $(id -u) -eq 0 ]] || die "run as root (the trees are owned by root)"
for t in ostree curl zstd tar python3 dpkg-deb; do
  command -v "$t" >/dev/null || die "$t is missing (scripts/install-deps.sh --bench)"
done

if [[ -z ${STRATA:-} ]]; then
  [[ -f $repo/build-bench/build.ninja ]] ||
    meson setup "$repo/build-bench" "$repo" --buildtype=release -Dtests=false >&2
  ninja -C "$repo/build-bench" >&2
  STRATA=$repo/build-bench/cli/strata
fi
rev=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git -C "$repo" diff --quiet HEAD -- 2>/dev/null || rev+=" + uncommitted changes"
export STRATA_PROGRESS=0

now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b - a) / 1e9}'; }
mb() { awk -v a="$1" 'BEGIN {printf "%.1f", a / 1e6}'; }
mbps() { awk -v a="$1" -v s="$2" 'BEGIN {printf "%.0f", a / 1e6 / s}'; }
file_bytes() { find "$@" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rm -rf -- "$work"
mkdir -p "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# --- trees -----------------------------------------------------------------
step "trees: $pkgs"
mkdir -p "$work/v1"
for p in $pkgs; do
  deb=$(ls "$fixtures/debs/bench-pack/${p}_"*.deb 2>/dev/null | head -n 1)
  [[ -n $deb ]] || die "no .deb for $p in $fixtures/debs/bench-pack (tests/fixtures/fetch-debs.sh)"
  dpkg-deb -x "$deb" "$work/v1"
done
tree_bytes=$(file_bytes "$work/v1")
say "  v1: $(mb "$tree_bytes") MB in $(find "$work/v1" -type f | wc -l) files"
cp -a "$work/v1" "$work/v2"
rand_bytes() { openssl enc -aes-128-ctr -nosalt -pass "pass:$1" </dev/zero 2>/dev/null | head -c "$2" || true; }
mapfile -t so_all < <(cd "$work/v2" && find . -type f \( -name '*.so' -o -name '*.so.*' \) | sort)
mapfile -t py_all < <(cd "$work/v2" && find . -type f -name '*.py' -size +0 | sort)
pick() { local n=$1; shift; local c=$# i; local -a a=("$@")
  if [[ $c -le $n ]]; then printf '%s\n' "$@"; return; fi
  for ((i = 0; i < n; i++)); do printf '%s\n' "${a[i * (c / n)]}"; done; }
mapfile -t so_pick < <(pick 50 "${so_all[@]}")
mapfile -t py_pick < <(pick 240 "${py_all[@]}")
i=0
for f in "${so_pick[@]}"; do rand_bytes "so-$i" 4096 >>"$work/v2/$f"; i=$((i + 1)); done
for f in "${py_pick[@]}"; do
  l=$(( ($(wc -l <"$work/v2/$f") + 1) / 2 )); [[ $l -ge 1 ]] || l=1
  sed -i "${l}s/\$/  # strata-bench v2/" "$work/v2/$f"
done
mkdir -p "$work/v2/usr/share/strata-bench"
for i in 1 2 3 4 5; do rand_bytes "new-$i" 1048576 >"$work/v2/usr/share/strata-bench/new-$i.bin"; done
say "  v2: ${#so_pick[@]} .so +4 KiB, ${#py_pick[@]} .py one line changed, 5 new 1 MiB files"

# --- sources: strata store, ostree archive repo, tar.zst --------------------
step "sources"
for v in v1 v2; do
  printf 'image: bench\ntag: %s\nlayers:\n  - name: tree\n    sources:\n      - dir: ./%s\n' "$v" "$v" \
    >"$work/$v.yaml"
done
(cd "$work" && "$STRATA" --store "$work/srv" -q build v1.yaml >/dev/null)
srv_chunks_v1=$(file_bytes "$work/srv/chunks")
ostree --repo="$work/ostree-src" init --mode=archive
ostree --repo="$work/ostree-src" commit --branch=bench --tree=dir="$work/v1" >/dev/null
mkdir -p "$work/http"
tar -C "$work/v1" -cf - . | zstd -q -3 -T0 -o "$work/http/v1.tar.zst"
ln -s "$work/ostree-src" "$work/http/repo"
tarzst_bytes=$(stat -c %s "$work/http/v1.tar.zst")
ostree_src_bytes=$(file_bytes "$work/ostree-src/objects")

http_port=$(free_port)
(cd "$work/http" && exec python3 -m http.server --bind 127.0.0.1 "$http_port" >"$work/http.log" 2>&1) &
pids+=($!)
"$STRATA" --store "$work/srv" serve --listen 127.0.0.1:0 --no-access-log >"$work/serve.log" 2>&1 &
spid=$!
pids+=($spid)
for _ in $(seq 100); do grep -q 'listening on' "$work/serve.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/serve.log")
[[ -n $addr ]] || die "strata serve did not start: $(cat "$work/serve.log")"
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$http_port/" && break; sleep 0.1; done
sync

# --- full pulls ------------------------------------------------------------
step "strata pull ($streams streams)"
t0=$(now_ns)
"$STRATA" --store "$work/dst" pull bench:v1 --server "$addr" --streams "$streams" >/dev/null 2>"$work/pull1.err"
t1=$(now_ns)
strata_s=$(secs "$t0" "$t1")
strata_wire=$(sed -n 's/.*chunks moved (\([0-9.]*\) MiB on the wire.*/\1/p' "$work/pull1.err")
strata_wire=$(awk -v m="$strata_wire" 'BEGIN {printf "%d", m * 1048576}')
cat "$work/pull1.err" >&2
"$STRATA" --store "$work/dst" export bench:v1 "$work/check" >/dev/null
diff -r --no-dereference "$work/v1" "$work/check" >/dev/null || die "pulled image differs from the tree"
rm -rf "$work/check"

step "ostree pull over HTTP"
ostree --repo="$work/ostree-dst" init --mode=archive
ostree --repo="$work/ostree-dst" remote add --no-gpg-verify src "http://127.0.0.1:$http_port/repo"
t0=$(now_ns)
ostree --repo="$work/ostree-dst" pull src bench >"$work/ostree.out" 2>&1
t1=$(now_ns)
ostree_s=$(secs "$t0" "$t1")
ostree_wire=$(file_bytes "$work/ostree-dst/objects")

step "curl tar.zst + zstd -d"
t0=$(now_ns)
curl -sf "http://127.0.0.1:$http_port/v1.tar.zst" | zstd -q -d -o "$work/v1.tar"
t1=$(now_ns)
tar_s=$(secs "$t0" "$t1")
rm -f "$work/v1.tar"

# --- re-pull after the 1% change ------------------------------------------
step "v2 (1% change) and re-pull"
(cd "$work" && "$STRATA" --store "$work/srv" -q build v2.yaml >/dev/null)
new_chunk_bytes=$(( $(file_bytes "$work/srv/chunks") - srv_chunks_v1 ))
t0=$(now_ns)
"$STRATA" --store "$work/dst" pull bench:v2 --server "$addr" --streams "$streams" >/dev/null 2>"$work/pull2.err"
t1=$(now_ns)
repull_s=$(secs "$t0" "$t1")
cat "$work/pull2.err" >&2
repull_wire=$(sed -n 's/.*chunks moved (\([0-9.]*\) MiB on the wire.*/\1/p' "$work/pull2.err")
repull_wire=$(awk -v m="$repull_wire" 'BEGIN {printf "%d", m * 1048576}')
ostree --repo="$work/ostree-src" commit --branch=bench --tree=dir="$work/v2" >/dev/null
before=$(file_bytes "$work/ostree-dst/objects")
ostree --repo="$work/ostree-dst" pull src bench >/dev/null 2>&1
ostree_repull=$(( $(file_bytes "$work/ostree-dst/objects") - before ))

# --- 50 concurrent pulls of a small image --------------------------------------
step "50 concurrent pulls of a small image"
mkdir -p "$work/small"
dpkg-deb -x "$(ls "$fixtures/debs/bench-pack/python3-numpy_"*.deb | head -n 1)" "$work/small/t"
printf 'image: small\ntag: v1\nlayers:\n  - name: t\n    sources:\n      - dir: ./t\n' >"$work/small/r.yaml"
(cd "$work/small" && "$STRATA" --store "$work/srv" -q build r.yaml >/dev/null)
rss_before=$(awk '/VmRSS/ {print $2}' "/proc/$spid/status")
cpids=()
t0=$(now_ns)
for i in $(seq 1 50); do
  "$STRATA" --store "$work/many/$i" -q pull small:v1 --server "$addr" --streams 2 >/dev/null 2>"$work/many-$i.err" &
  cpids+=($!)
done
fails=0
for p in "${cpids[@]}"; do wait "$p" || fails=$((fails + 1)); done
t1=$(now_ns)
many_s=$(secs "$t0" "$t1")
rss_peak=$(awk '/VmHWM/ {print $2}' "/proc/$spid/status")
small_bytes=$(file_bytes "$work/small/t")
rm -rf "$work/many"

# --- results ---------------------------------------------------------------
{
  echo "strata $rev, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "tree: $pkgs: $(mb "$tree_bytes") MB, $(find "$work/v1" -type f | wc -l) files"
  printf '%-34s %8s %10s %12s\n' "full pull over loopback" "seconds" "MB/s(tree)" "MB on wire"
  printf '%-34s %8s %10s %12s\n' "strata pull ($streams streams)" "$strata_s" "$(mbps "$tree_bytes" "$strata_s")" "$(mb "$strata_wire")"
  printf '%-34s %8s %10s %12s\n' "ostree pull (archive, HTTP)" "$ostree_s" "$(mbps "$tree_bytes" "$ostree_s")" "$(mb "$ostree_wire")"
  printf '%-34s %8s %10s %12s\n' "curl tar.zst | zstd -d" "$tar_s" "$(mbps "$tree_bytes" "$tar_s")" "$(mb "$tarzst_bytes")"
  echo "strata vs ostree throughput: $(awk -v a="$ostree_s" -v b="$strata_s" 'BEGIN {printf "%.2fx", a / b}'); strata vs tar.zst wall time: $(awk -v a="$strata_s" -v b="$tar_s" 'BEGIN {printf "%.2fx", a / b}')"
  echo "re-pull after the 1% change: strata sent $(mb "$repull_wire") MB (chunk frames + index + manifest) in ${repull_s} s;"
  echo "  new chunks in v2 (compressed, as stored): $(mb "$new_chunk_bytes") MB -> ratio $(awk -v a="$repull_wire" -v b="$new_chunk_bytes" 'BEGIN {printf "%.2f", a / b}');"
  echo "  ostree re-pull: $(mb "$ostree_repull") MB of new objects"
  echo "50 concurrent pulls of small:v1 ($(mb "$small_bytes") MB): $fails failed, ${many_s} s; server RSS ${rss_before} kB before, peak ${rss_peak} kB"
} | tee "$work/results.txt"
