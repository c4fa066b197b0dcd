#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata prewarm --server: from `strata serve` on 127.0.0.1 into a fresh node
# directory; the environment runs; a second run fetches nothing; a change to
# the top layer fetches only its new data and writes only its new files (the
# file map; a damaged record costs one rewrite); a corrupt chunk on the server
# fails naming it and commits nothing for its layer, and succeeds after the
# repair;
# --max-rate spaces the fetch out; an unreachable server or an unknown image
# is one clear error.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node-lib.sh"
need_root
command -v ostree >/dev/null || skip "ostree not installed"
need_sandbox

W=$T/w
mkdir -p "$W/app"
tiny_root "$W/rootfs"
printf 'hello\n' >"$W/app/hello"
rand_file "$W/app/data" 300000
S=$T/store
N=$T/node
cd "$W"
tiny_recipe "$W" v1
expect_ok st "$S" build r.yaml
img1=$(awk '$1 == "tiny:v1" && $2 ~ /^sha256:/ {print $2}' "$T/out")
start_server "$S"

pw() { "$STRATA" prewarm --node-dir "$N" --server "$ADDR" "$@"; }
expect_ok pw --json tiny:v1
[ "$(jfield result)" = prewarmed ] && [ "$(jfield digest)" = "$img1" ] || fail "first: $(cat "$T/out")"
[ "$(jfield layers_committed)" = 2 ] || fail "layers: $(cat "$T/out")"
[ "$(jfield bytes_fetched)" -gt 300000 ] || fail "fetched: $(cat "$T/out")"
[ "$(jfield files_reused)" = 0 ] || fail "a fresh node reused files: $(cat "$T/out")"
# the phases are each part of the whole
python3 - "$T/out" <<'EOP' || fail "phase seconds: $(cat "$T/out")"
import json, sys
r = json.load(open(sys.argv[1]))["images"][0]
parts = [r["fetch_seconds"], r["commit_seconds"], r["checkout_seconds"]]
assert all(p > 0 for p in parts) and sum(parts) <= r["seconds"] + 0.002, r
EOP
ofsck "$N"
expect_ok "$STRATA" env run --node-dir "$N" tiny:v1 -- cat /app/data
cmp -s "$T/out" "$W/app/data" || fail "content through the server"
expect_ok pw --json tiny:v1
[ "$(jfield result)" = ready ] && [ "$(jfield bytes_fetched)" = 0 ] || fail "second: $(cat "$T/out")"

# --- delta through the server ---
rand_file "$W/app/new" 200000
tiny_recipe "$W" v2
expect_ok st "$S" build r.yaml
img2=$(awk '$1 == "tiny:v2" && $2 ~ /^sha256:/ {print $2}' "$T/out")
expect_ok st "$S" inspect tiny:v2
app2=$(awk '$1 == "app" {print $2}' "$T/out")
idx_bytes=$(stat -c %s "$(object_path "$S" indexes "$app2")")
man_bytes=$(stat -c %s "$(object_path "$S" manifests "$img2")")
expect_ok pw --json tiny:v2
[ "$(jfield layers_committed)" = 1 ] || fail "delta: $(cat "$T/out")"
f=$(jfield bytes_fetched)
max=$((200000 * 11 / 10 + idx_bytes + man_bytes))
[ "$f" -ge 200000 ] && [ "$f" -le "$max" ] || fail "delta fetched $f bytes, want 200000..$max"
# the changed layer's unchanged files (hello, data) reuse their objects
[ "$(jfield files_reused)" = 2 ] || fail "delta reused: $(cat "$T/out")"
for f in new data hello; do
  cmp "$W/app/$f" "$N/checkouts/${img2#sha256:}/app/$f" || fail "delta content: $f"
done
# a damaged file map record only costs a rewrite of that file
[ -s "$N/repo.files" ] || fail "no file map"
flip_byte "$N/repo.files" 40

# --- a corrupt chunk on the server ---
rand_file "$W/app/new" 100000
tiny_recipe "$W" v3
expect_ok st "$S" build r.yaml
img3=$(awk '$1 == "tiny:v3" && $2 ~ /^sha256:/ {print $2}' "$T/out")
expect_ok st "$S" inspect tiny:v3
app3=$(awk '$1 == "app" {print $2}' "$T/out")
obj=""
for c in "$S"/chunks/*/*; do
  [ -e "$(object_path "$N/cache" chunks "$(basename "$c")")" ] || { obj=$c; break; }
done
[ -n "$obj" ] || fail "no new chunk"
chex=$(basename "$obj")
cp "$obj" "$T/good"
flip_byte "$obj" $(($(stat -c %s "$obj") / 2))
expect_fail 1 "$chex" pw tiny:v3
ostree refs --repo="$N/repo" >"$T/refs"
grep -q "${app3#sha256:}" "$T/refs" && fail "a layer with a corrupt chunk was committed"
[ ! -e "$N/checkouts/${img3#sha256:}" ] || fail "checkout after a corrupt chunk"
cp "$T/good" "$obj"
expect_ok pw --json tiny:v3
[ "$(jfield result)" = prewarmed ] || fail "after repair: $(cat "$T/out")"
[ "$(jfield files_reused)" -ge 1 ] || fail "v3 reused nothing: $(cat "$T/out")"
for f in new data hello; do
  cmp "$W/app/$f" "$N/checkouts/${img3#sha256:}/app/$f" || fail "v3 content: $f"
done
ofsck "$N"

# --- errors ---
expect_fail 1 "tiny:nope" pw tiny:nope
expect_fail 2 "exactly one of" "$STRATA" prewarm --node-dir "$N" --server "$ADDR" --from-store "$S" tiny:v1

# --- --max-rate: a lower bound only (a loaded machine is slower, never faster)
rand_file "$W/app/big" 3000000
tiny_recipe "$W" v4
expect_ok st "$S" build r.yaml
t0=$(date +%s%N)
expect_ok "$STRATA" prewarm --node-dir "$T/node-rate" --server "$ADDR" --max-rate 1M --json tiny:v4
t1=$(date +%s%N)
f=$(jfield bytes_fetched)
[ "$f" -gt 3000000 ] || fail "rate-limited prewarm fetched $f bytes"
# the last batch (at most 1 MiB) may arrive unthrottled; all before it is spaced
min_ms=$(( (f - 1048576) * 1000 / 1048576 ))
ms=$(( (t1 - t0) / 1000000 ))
[ "$ms" -ge "$min_ms" ] || fail "--max-rate 1M moved $f bytes in $ms ms (at least $min_ms expected)"
expect_ok "$STRATA" env run --node-dir "$T/node-rate" tiny:v4 -- cat /app/big
cmp -s "$T/out" "$W/app/big" || fail "content after a rate-limited prewarm"
expect_fail 2 "max-rate" pw --max-rate nope tiny:v1
kill "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
expect_fail 1 "$ADDR" "$STRATA" prewarm --node-dir "$T/node2" --server "$ADDR" --deadline 5 tiny:v1
# the images already here still start
expect_ok "$STRATA" env run --node-dir "$N" tiny:v3 -- cat /app/new
cmp -s "$T/out" "$W/app/new" || fail "content after the server went away"
echo PASS
