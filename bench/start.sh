#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/start.sh — the node side on the example image (recipes/debian-pytorch.yaml,
# cell scipy=no), against the plain container flow:
#
#   (a) time from "image pre-warmed" to the first output of a command in the
#       environment (`strata env run IMAGE -- /bin/echo`), cold (first start
#       after the prewarm, page cache dropped) and warm (fastest of 5), vs.
#       extracting every layer's tar.zst into a fresh directory and running the
#       same command there with bubblewrap;
#   (b) a full prewarm from `strata serve` on 127.0.0.1 into a fresh node
#       directory vs. fetching the layers as tar.zst over loopback HTTP
#       (python3 -m http.server) and extracting them (curl | zstd -d | tar -x);
#   (c) a delta prewarm after a recipe change that touches only the top layer
#       (a 3 MB file added to `tools`): bytes fetched vs. the compressed size of
#       the data the node lacks (the chunks the rebuild added to the store).
#
# Environment:
#   BENCH_WORK        work dir, default /var/tmp/strata-bench-start (outside the repo);
#                     the built store and the layer tar.zst files are kept for reruns
#   STRATA            strata binary; default: build-bench/ in the repo (release build)
#   STRATA_FIXTURES   .deb cache, default /var/cache/strata-fixtures
#   BENCH_NO_DROP=1   do not drop the page cache for the cold start
#
# Needs root (bubblewrap, a bare OSTree repo, dropping the page cache). Figures
# are printed at the end and kept in $BENCH_WORK/results.txt.
set -euo pipefail
export LC_ALL=C
prog=bench/start.sh
die() { printf '\n%s: FAILED: %s\n' "$prog" "$*" >&2; exit 1; }
say() { printf '%s\n' "$*" >&2; }
step() { printf '\n== %s\n' "$*" >&2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(dirname "$here")
work=${BENCH_WORK:-/var/tmp/strata-bench-start}
[ "$(id -u)" -eq 0 ] || die "needs root"
for t in bwrap curl zstd tar python3 ostree; do
  command -v "$t" >/dev/null || die "'$t' is not installed (scripts/install-deps.sh --bench)"
done
if [[ -n ${STRATA:-} ]]; then
  strata_rev="given binary $STRATA"
else
  if [[ ! -f $repo/build-bench/build.ninja ]]; then
    meson setup "$repo/build-bench" "$repo" --buildtype=release -Dtests=false >&2
  fi
  ninja -C "$repo/build-bench" >&2 || die "building strata failed"
  STRATA=$repo/build-bench/cli/strata
  strata_rev=$(git -C "$repo" rev-parse --short=12 HEAD)
  git -C "$repo" diff --quiet HEAD -- || strata_rev+=" + uncommitted changes"
fi
export STRATA_PROGRESS=0
mkdir -p "$work"
run=$work/run
rm -rf "$run"
mkdir -p "$run"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# first_output CMD...: seconds from start to the first byte on stdout
first_output() {
  python3 - "$@" <<'PY'
import subprocess, sys, time
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
first = p.stdout.read(1)
t1 = time.monotonic()
p.stdout.read()
rc = p.wait()
if not first or rc != 0:
    sys.exit("command failed: %r (exit %d)" % (sys.argv[1:], rc))
print("%.3f" % (t1 - t0))
PY
}
secs() { python3 -c 'import sys, time; print("%.2f" % (time.monotonic() - float(sys.argv[1])))' "$1"; }
now() { python3 -c 'import time; print(time.monotonic())'; }

step "packages and the image"
debs=$("$repo/tests/fixtures/fetch-pytorch-debs.sh") || die "fetching the packages failed"
R=$work/recipe
mkdir -p "$R"
cp "$repo/recipes/debian-pytorch.yaml" "$R/r.yaml"
ln -sfn "$debs" "$R/debs"
IMG=debian-pytorch:1.13-scipy-no
S=$work/store
"$STRATA" --store "$S" build --cell scipy=no "$R/r.yaml" >&2 || die "build failed"
img=$("$STRATA" --store "$S" inspect "$IMG" | awk '$1 == "digest" {print $2}')
mapfile -t layers < <("$STRATA" --store "$S" inspect "$IMG" | awk '/^  [a-z]+ +sha256:/ {print $2}')
size=$("$STRATA" --store "$S" inspect "$IMG" | awk '$1 == "size" {print $2, $3}')
say "$IMG $img: ${#layers[@]} layers, $size"

step "layer tar.zst files (the container flow's input)"
tars=$work/tars/${img#sha256:}
if [[ ! -f $tars/.done ]]; then
  rm -rf "$tars"
  mkdir -p "$tars"
  i=0
  for l in "${layers[@]}"; do
    "$STRATA" --store "$S" layer unpack "$l" "$run/layer$i" >&2
    tar -C "$run/layer$i" --numeric-owner -cf - . | zstd -q -3 -T0 >"$tars/layer$i.tar.zst"
    rm -rf "$run/layer$i"
    i=$((i + 1))
  done
  touch "$tars/.done"
fi
tar_bytes=$(cat "$tars"/layer*.tar.zst | wc -c)
say "tar.zst: $tar_bytes bytes"

step "(b) full prewarm from strata serve vs. HTTP fetch + extract of tar.zst"
port=$(free_port)
"$STRATA" --store "$S" serve --listen "127.0.0.1:$port" --no-access-log 2>"$run/serve.log" &
pids+=($!)
hport=$(free_port)
(cd "$tars" && exec python3 -m http.server "$hport" --bind 127.0.0.1) >/dev/null 2>&1 &
pids+=($!)
sleep 2
N=$run/node
sync
t0=$(now)
"$STRATA" prewarm --node-dir "$N" --server "127.0.0.1:$port" --json "$IMG" >"$run/prewarm.json" || die "prewarm failed"
prewarm_s=$(secs "$t0")
prewarm_fetched=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images"][0]["bytes_fetched"])' "$run/prewarm.json")
X=$run/extract
mkdir -p "$X"
sync
t0=$(now)
for ((i = 0; i < ${#layers[@]}; i++)); do
  curl -sf "http://127.0.0.1:$hport/layer$i.tar.zst" | zstd -q -d | tar -C "$X" --numeric-owner -xpf - ||
    die "fetch+extract of layer $i failed"
done
http_s=$(secs "$t0")
say "prewarm ${prewarm_s} s ($prewarm_fetched bytes), HTTP fetch + extract ${http_s} s ($tar_bytes bytes)"

step "(a) environment start"
drop() { [[ -n ${BENCH_NO_DROP:-} ]] || { sync; echo 3 >/proc/sys/vm/drop_caches; }; }
drop
cold=$(first_output "$STRATA" env run --node-dir "$N" "$IMG" -- /bin/echo started)
warm=()
for k in 1 2 3 4 5; do warm+=("$(first_output "$STRATA" env run --node-dir "$N" "$IMG" -- /bin/echo started)"); done
warm_min=$(printf '%s\n' "${warm[@]}" | sort -n | head -n 1)
torch_warm=$(first_output "$STRATA" env run --node-dir "$N" "$IMG" -- python3 -c 'import torch; print(torch.__version__)')
X2=$run/extract2
extract_run() {
  mkdir -p "$X2"
  for f in "$tars"/layer*.tar.zst; do zstd -q -d <"$f" | tar -C "$X2" --numeric-owner -xpf -; done
  exec bwrap --bind "$X2" / --proc /proc --dev /dev --tmpfs /tmp --unshare-pid /bin/echo started
}
export -f extract_run
export X2 tars
rm -rf "$X2" # not timed: a fresh node has an empty directory
drop
extract_cold=$(first_output bash -c extract_run)
rm -rf "$X2"
sync
extract_warm=$(first_output bash -c extract_run)
say "env run cold $cold s, warm $warm_min s (runs: ${warm[*]}); extract-then-run cold $extract_cold s, warm $extract_warm s"

step "(c) delta prewarm"
find "$S/chunks" -type f | sort >"$run/chunks.before"
head -c 3000000 /dev/urandom >"$R/delta.bin"
cp "$repo/recipes/debian-pytorch.yaml" "$R/r-delta.yaml"
python3 - "$R/r-delta.yaml" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
anchor = "      - deb: ./debs/pytorch-tools-scipy-${scipy}/*.deb\n"
s = s.replace(anchor, anchor + "      - file: ./delta.bin\n        dest: /opt/delta.bin\n")
open(p, "w").write(s)
PY
"$STRATA" --store "$S" build --cell scipy=no "$R/r-delta.yaml" >"$run/delta-build.out" || die "delta build failed"
find "$S/chunks" -type f | sort >"$run/chunks.after"
new_bytes=$(comm -13 "$run/chunks.before" "$run/chunks.after" | xargs -r stat -c %s | awk '{s += $1} END {print s + 0}')
t0=$(now)
"$STRATA" prewarm --node-dir "$N" --server "127.0.0.1:$port" --json "$IMG" >"$run/delta.json" || die "delta prewarm failed"
delta_s=$(secs "$t0")
delta_fetched=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images"][0]["bytes_fetched"])' "$run/delta.json")
# put the store back: the next run starts from the same image
for f in $(comm -13 "$run/chunks.before" "$run/chunks.after"); do rm -f "$f"; done
"$STRATA" --store "$S" build --cell scipy=no "$R/r.yaml" >/dev/null

ratio() { python3 -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
{
  echo "strata $strata_rev; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "image $IMG $img: ${#layers[@]} layers, $size; layer tar.zst files $tar_bytes bytes"
  echo
  echo "(a) start to first output (/bin/echo)     seconds   vs extract-then-run"
  printf '  strata env run, cold                  %7s   %s x faster\n' "$cold" "$(ratio "$extract_cold" "$cold")"
  printf '  strata env run, warm (fastest of 5)   %7s   %s x faster\n' "$warm_min" "$(ratio "$extract_warm" "$warm_min")"
  printf '  extract tar.zst + bwrap, cold         %7s\n' "$extract_cold"
  printf '  extract tar.zst + bwrap, warm         %7s\n' "$extract_warm"
  printf '  strata env run python3 import torch, warm: %s s to the version line\n' "$torch_warm"
  echo
  echo "(b) full prewarm                          seconds   bytes fetched"
  printf '  strata prewarm --server (loopback)    %7s   %s\n' "$prewarm_s" "$prewarm_fetched"
  printf '  curl | zstd -d | tar -x (loopback)    %7s   %s\n' "$http_s" "$tar_bytes"
  printf '  ratio prewarm / fetch+extract            %s\n' "$(ratio "$prewarm_s" "$http_s")"
  echo
  echo "(c) delta prewarm (3 MB new file in the top layer)"
  printf '  bytes fetched %s; new chunk data in the store %s; ratio %s; %s s\n' \
    "$delta_fetched" "$new_bytes" "$(ratio "$delta_fetched" "$new_bytes")" "$delta_s"
} | tee "$work/results.txt"
