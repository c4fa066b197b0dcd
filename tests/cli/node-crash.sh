#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# prewarm is cron-safe: two runs at once both succeed (the second waits for
# the lock, or with --no-wait exits 3 naming the holder); kill -9 at any
# moment, then a re-run completes without fetching again the chunks already
# verified into the node cache, and the repo fscks clean; a full disk is one
# clear error and leaves the repo intact.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node-lib.sh"
need_root
command -v ostree >/dev/null || skip "ostree not installed"
command -v flock >/dev/null || skip "flock not installed"

W=$T/w
mkdir -p "$W/app"
tiny_root "$W/rootfs"
printf 'hello\n' >"$W/app/hello"
for i in 0 1 2 3 4 5 6 7; do
  mkdir -p "$W/app/d$i"
  rand_file "$W/app/d$i/big" 400000
  for k in 0 1 2 3 4 5 6 7 8 9; do text_file "$W/app/d$i/t$k" 3000 "$i$k"; done
done
S=$T/store
cd "$W"
tiny_recipe "$W" v1
expect_ok st "$S" build r.yaml
img=$(awk '$1 == "tiny:v1" && $2 ~ /^sha256:/ {print $2}' "$T/out")
total_chunks=$(find "$S/chunks" -type f | wc -l)

# --- two prewarms at once ---
N=$T/node
"$STRATA" prewarm --node-dir "$N" --from-store "$S" --max-rate 2M tiny:v1 >"$T/a.out" 2>"$T/a.err" &
pa=$!
wait_until 20 test -s "$N/lock" || fail "the first prewarm took no lock"
# while it runs: --no-wait exits 3 naming the holder
expect_fail 3 "^strata: error: node $N is locked by another prewarm or gc \\(pid $pa\\)$" \
  "$STRATA" prewarm --node-dir "$N" --from-store "$S" --no-wait tiny:v1
"$STRATA" prewarm --node-dir "$N" --from-store "$S" tiny:v1 >"$T/b.out" 2>"$T/b.err" &
pb=$!
wait "$pa" || fail "first concurrent prewarm failed: $(cat "$T/a.err")"
wait "$pb" || fail "second concurrent prewarm failed: $(cat "$T/b.err")"
grep -q "prewarmed: " "$T/a.out" || fail "first: $(cat "$T/a.out")"
grep -q "waiting for node $N (locked by pid $pa)" "$T/b.err" || fail "second did not wait: $(cat "$T/b.err")"
grep -q "ready: fetched 0 B" "$T/b.out" || fail "second: $(cat "$T/b.out")"
ofsck "$N"

# --- kill -9 while fetching, then re-run ---
N=$T/node-kill
"$STRATA" prewarm --node-dir "$N" --from-store "$S" --max-rate 1M -j 1 tiny:v1 >/dev/null 2>&1 &
pk=$!
wait_until 30 sh -c "[ \$(find '$N/cache/chunks' -type f 2>/dev/null | wc -l) -ge 10 ]" ||
  fail "no chunk arrived"
kill -9 "$pk"
wait "$pk" 2>/dev/null || true
have=$(find "$N/cache/chunks" -type f | wc -l)
[ "$have" -lt "$total_chunks" ] || fail "the prewarm finished before it was killed"
ofsck "$N"
expect_ok st "$N/cache" store fsck
prewarm_json "$N" "$S" tiny:v1
[ "$(jfield result)" = prewarmed ] || fail "re-run: $(cat "$T/out")"
got=$(jfield chunks_fetched)
[ "$got" -eq $((total_chunks - have)) ] ||
  fail "re-run fetched $got chunks; $have of $total_chunks were already in the cache"
ofsck "$N"
cmp "$W/app/d7/big" "$N/checkouts/${img#sha256:}/app/d7/big" || fail "content after the re-run"

# --- kill -9 at other moments (commit, compose, checkout) ---
N=$T/node-kills
for delay in 0.05 0.1 0.2 0.3 0.4 0.6 0.8; do
  "$STRATA" prewarm --node-dir "$N" --from-store "$S" tiny:v1 >/dev/null 2>&1 &
  pk=$!
  sleep "$delay"
  kill -9 "$pk" 2>/dev/null || true
  wait "$pk" 2>/dev/null || true
  [ ! -d "$N/repo" ] || ofsck "$N"
done
prewarm_json "$N" "$S" tiny:v1
[ "$(jfield result)" != failed ] || fail "after kills: $(cat "$T/out")"
ofsck "$N"
[ -z "$(find "$N/checkouts" -maxdepth 1 -name '.tmp-*')" ] || fail "staging checkout left behind"
expect_ok "$STRATA" env ls --node-dir "$N"
grep -q "^tiny:v1 " "$T/out" || fail "env ls after kills: $(cat "$T/out")"
cmp "$W/app/d3/big" "$N/checkouts/${img#sha256:}/app/d3/big" || fail "content after kills"

# --- a full disk ---
mnt=$T/mnt
mkdir -p "$mnt"
mount -t tmpfs -o size=6m,mode=0755 strata-node-test "$mnt" 2>/dev/null ||
  skip "cannot mount a tmpfs"
on_exit "umount -l '$mnt'"
N=$mnt/node
expect_fail 1 "(No space left|min-free-space)" "$STRATA" prewarm --node-dir "$N" --from-store "$S" tiny:v1
grep -q 'tiny:v1' "$T/err" || fail "the error does not name the image: $(cat "$T/err")"
[ ! -e "$N/checkouts/${img#sha256:}" ] || fail "a checkout on a full disk"
if [ -d "$N/repo" ]; then ofsck "$N"; fi
expect_ok st "$N/cache" store fsck
echo PASS
