#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Damaged stores and bad input: every failure is exit 1 with one clear error
# line naming the object, an unpack into a new DEST leaves nothing behind,
# fsck finds the damage, and deleting a bad chunk then repacking repairs it.
. "$(dirname "$0")/lib.sh"

S=$T/store
src=$T/src
mkdir -p "$src/d"
rand_file "$src/d/small" 10000 # below the minimum chunk size: one chunk, id = sha256 of the file
rand_file "$src/big" 1500000
text_file "$src/text" 400000
d=$(pack "$S" "$src")
dhex=${d#sha256:}
small_chunk=$(sha256sum <"$src/d/small" | cut -c1-64)
cfile=$(object_path "$S" chunks "$small_chunk")
[ -f "$cfile" ] || fail "chunk of d/small not at $cfile"
cp "$cfile" "$T/chunk.good"
ifile=$(object_path "$S" indexes "$d")
[ -f "$ifile" ] || fail "index not at $ifile"
cp "$ifile" "$T/index.good"

# fsck finding damage exits 1 and reports on stdout ('BAD ...' lines).
expect_fsck_bad() {
  run st "$S" store fsck
  [ "$rc" -eq 1 ] || fail "fsck of a damaged store: exit $rc"
  grep -q '^BAD ' "$T/out" || fail "fsck printed no BAD line"
}

# --- one flipped byte in a chunk ---
flip_byte "$cfile" 100
expect_fail 1 "$small_chunk.*corrupt|corrupt.*$small_chunk" st "$S" layer unpack "$d" "$T/dest"
grep -q '/d/small' "$T/err" || fail "unpack error does not name the file: $(cat "$T/err")"
[ ! -e "$T/dest" ] || fail "failed unpack left $T/dest"
assert_no_unpack_tmp "$T"
# into an existing dir: still a clean failure
mkdir "$T/dest2"
expect_fail 1 "$small_chunk.*corrupt" st "$S" layer unpack "$d" "$T/dest2"
expect_fsck_bad
grep -Eq "^BAD .*$small_chunk.*corrupt" "$T/out" || fail "fsck did not report the chunk: $(cat "$T/out")"
[ "$(grep -c '^BAD' "$T/out")" -eq 1 ] || fail "fsck reported more than the one bad chunk: $(cat "$T/out")"
grep -q '1 corrupt' "$T/out" || fail "fsck summary: $(cat "$T/out")"
# ls does not read chunks; it still works
expect_ok st "$S" layer ls "$d"

# Repacking may trust the existing (bad) file; if so the documented repair is
# to delete the bad chunk and pack again. Either way the store ends up sound.
d2=$(pack "$S" "$src")
[ "$d2" = "$d" ] || fail "repack gave $d2, want $d"
run st "$S" store fsck
if [ "$rc" -ne 0 ]; then
  rm "$cfile"
  d2=$(pack "$S" "$src")
  [ "$d2" = "$d" ] || fail "repack after delete gave $d2"
fi
expect_ok st "$S" store fsck
cmp -s "$cfile" "$T/chunk.good" || fail "repaired chunk differs from the original"
expect_ok st "$S" layer unpack "$d" "$T/dest"
assert_same_tree "$src" "$T/dest"
rm -rf "$T/dest" "$T/dest2"

# --- a missing chunk ---
rm "$cfile"
expect_fail 1 "$small_chunk.*not found|not found.*$small_chunk|$small_chunk.*missing" \
  st "$S" layer unpack "$d" "$T/dest"
[ ! -e "$T/dest" ] || fail "failed unpack left $T/dest"
assert_no_unpack_tmp "$T"
expect_fsck_bad
grep -Eq "^BAD .*$dhex.*/d/small.*$small_chunk.*missing" "$T/out" ||
  fail "fsck did not report the missing chunk: $(cat "$T/out")"
cp "$T/chunk.good" "$cfile"
expect_ok st "$S" store fsck

# --- damaged layer index ---
truncate -s $(($(stat -c %s "$ifile") / 2)) "$ifile"
expect_fail 1 "$dhex" st "$S" layer ls "$d"
expect_fail 1 "$dhex" st "$S" layer unpack "$d" "$T/dest"
[ ! -e "$T/dest" ] || fail "failed unpack left $T/dest"
assert_no_unpack_tmp "$T"
expect_fail 1 "$dhex" st "$S" layer diff "$d" "$d"
expect_fsck_bad
grep -Eq "^BAD .*$dhex" "$T/out" || fail "fsck did not report the index: $(cat "$T/out")"
# a valid zstd frame with the wrong content (another object's file)
cp "$cfile" "$ifile"
expect_fail 1 "$dhex.*corrupt" st "$S" layer ls "$d"
# an empty file
: >"$ifile"
expect_fail 1 "$dhex" st "$S" layer ls "$d"
cp "$T/index.good" "$ifile"
expect_ok st "$S" layer ls "$d"
expect_ok st "$S" store fsck

# --- unknown and invalid digests ---
unknown=sha256:$(printf 'nothing' | sha256sum | cut -c1-64)
expect_fail 1 "${unknown#sha256:}.*not found" st "$S" layer ls "$unknown"
expect_fail 1 "not found" st "$S" layer unpack "$unknown" "$T/dest"
[ ! -e "$T/dest" ] || fail "unpack of an unknown layer created $T/dest"
expect_fail 1 "not found" st "$S" layer diff "$d" "$unknown"
for bad in 'sha256:xyz' 'nothex' "sha256:${dhex^^}" "${dhex}0" "md5:$dhex" ''; do
  run st "$S" layer ls "$bad"
  [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ] || fail "invalid digest '$bad': exit $rc"
  grep -Eqi 'invalid digest|digest' "$T/err" || fail "invalid digest '$bad': $(cat "$T/err")"
done
# a bare hex digest is accepted
expect_ok st "$S" layer ls "$dhex"

# --- bad store ---
cp "$S/config" "$T/config.good"
printf 'garbage\x01\n' >"$S/config"
expect_fail 1 "store $S.*config" st "$S" layer ls "$d"
expect_fail 1 "store $S" st "$S" store fsck
expect_fail 1 "store $S" st "$S" layer pack "$src"
printf 'format = 99\nchunk-min = 16384\nchunk-avg = 65536\nchunk-max = 262144\nzstd-level = 3\n' >"$S/config"
expect_fail 1 "store $S.*format" st "$S" layer ls "$d"
rm "$S/config"
expect_fail 1 "store $S.*not a strata store" st "$S" layer ls "$d"
expect_fail 1 "not a strata store" st "$S" store stats
# an existing non-store directory is not silently turned into one
mkdir "$T/plain"
expect_fail 1 "store $T/plain.*not a strata store" st "$T/plain" layer pack "$src"
expect_fail 1 "$T/missing" st "$T/missing" layer ls "$d"
[ ! -e "$T/missing" ] || fail "a read command created the store $T/missing"
cp "$T/config.good" "$S/config"
expect_ok st "$S" store fsck

# --- bad arguments ---
expect_fail 1 "$T/no-such-tree" st "$S" layer pack "$T/no-such-tree"
printf 'x' >"$T/a-file"
expect_fail 1 "$T/a-file" st "$S" layer pack "$T/a-file"
expect_fail 1 "$T/a-file.*not a directory" st "$S" layer unpack "$d" "$T/a-file"
[ "$(cat "$T/a-file")" = x ] || fail "unpack onto a file changed it"
expect_fail 2 "usage" st "$S" layer pack
expect_fail 2 "usage" st "$S" layer unpack "$d"
expect_fail 2 "usage" st "$S" layer ls
expect_fail 2 "usage" st "$S" layer diff "$d"
expect_fail 2 "usage" st "$S" layer frobnicate
expect_fail 2 "usage" st "$S" store frobnicate
expect_fail 2 "unknown option|usage" st "$S" layer ls --bogus "$d"
expect_fail 2 "-j" st "$S" layer pack -j many "$src"
expect_fail 2 "usage" "$STRATA"
expect_fail 2 "unknown command" "$STRATA" frobnicate
expect_ok st "$S" store fsck
echo PASS
