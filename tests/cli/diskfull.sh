#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A full file system is a clean failure: one 'No space left' error line,
# exit 1, no partial object or index visible, no temp file or space leaked;
# an unpack into a new DEST on a full file system leaves no DEST.
. "$(dirname "$0")/lib.sh"
need_root

mnt=$T/mnt
mkdir -p "$mnt"
mount -t tmpfs -o size=8m,mode=0755 strata-test "$mnt" 2>/dev/null ||
  skip "cannot mount a tmpfs (needs root or CAP_SYS_ADMIN)"
on_exit "umount -l '$mnt'"

used() { df -B1 --output=used "$mnt" | tail -n 1 | tr -d ' '; }
avail() { df -B1 --output=avail "$mnt" | tail -n 1 | tr -d ' '; }

src=$T/src
mkdir -p "$src/d"
for i in 0 1 2; do rand_file "$src/d/r$i" 10000000; done

# --- pack a 30 MB incompressible tree into an 8 MiB store ---
S=$mnt/store
expect_ok st "$S" store init
before=$(used)
expect_fail 1 'No space left' st "$S" layer pack "$src"
[ "$(grep -c . "$T/err")" -eq 1 ] || fail "want one line on stderr, got: $(cat "$T/err")"
grep -Eq "^strata: error: store $S: .*No space left on device$" "$T/err" ||
  fail "error does not name the store: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "a failed pack printed a digest: $(cat "$T/out")"
assert_empty_dir "$S/indexes"
assert_empty_dir "$S/tmp" # the failing process removed its own temp files
after=$(used)
[ "$after" -le $((before + 8192)) ] || fail "space leaked: $before bytes used before, $after after"
expect_ok st "$S" store fsck
grep -q 'checked .* 0 indexes.*: ok$' "$T/out" || fail "fsck: $(cat "$T/out")"
# nothing was left half-written: whatever chunk got published verifies (fsck above)

# --- just enough room for the chunks, not for the index ---
# Leave k pages free, from one less than the chunks need, until the pack fits. Every failure must
# be clean; at some k the chunks fit but the index does not.
small=$T/small
mkdir -p "$small"
rand_file "$small/f" 100000
ref=$(pack "$T/ref" "$small")
saw_index_failure=0
ok=0
pages=0
for f in "$T"/ref/chunks/*/*; do pages=$((pages + ($(stat -c %s "$f") + 4095) / 4096)); done
for k in $(seq $((pages - 1)) $((pages + 8))); do
  rm -rf "$S" "$mnt/filler"
  expect_ok st "$S" store init
  head -c $(($(avail) - k * 4096)) /dev/zero >"$mnt/filler" || true
  run st "$S" layer pack "$small"
  if [ "$rc" -eq 0 ]; then
    [ "$(tail -n 1 "$T/out")" = "$ref" ] || fail "pack with $k free pages gave $(tail -n 1 "$T/out")"
    ok=1
    break
  fi
  [ "$rc" -eq 1 ] || fail "pack with $k free pages: exit $rc"
  grep -Eq '^strata: error: .*No space left on device$' "$T/err" || fail "k=$k: $(cat "$T/err")"
  grep -q 'write index' "$T/err" && saw_index_failure=1
  assert_empty_dir "$S/indexes"
  assert_empty_dir "$S/tmp"
  expect_ok st "$S" store fsck
done
[ "$ok" -eq 1 ] || fail "the small tree never fitted"
[ "$saw_index_failure" -eq 1 ] || fail "never hit the case where chunks fit but the index does not"
expect_ok st "$S" store fsck
expect_ok st "$S" layer unpack "$ref" "$T/small-out"
cmp "$small/f" "$T/small-out/f" || fail "unpacked content differs"
rm -rf "$S" "$mnt/filler"

# --- unpack into a full file system ---
S=$T/store
d=$(pack "$S" "$src")
before=$(used)
expect_fail 1 'No space left' st "$S" layer unpack "$d" "$mnt/dest"
grep -Eq "^strata: error: .*$mnt/dest.*No space left on device$" "$T/err" ||
  fail "error does not name the destination: $(cat "$T/err")"
[ ! -e "$mnt/dest" ] || fail "failed unpack left $mnt/dest"
[ -z "$(ls -A "$mnt")" ] || fail "failed unpack left: $(ls -A "$mnt")"
after=$(used)
[ "$after" -le "$before" ] || fail "space leaked: $before bytes used before, $after after"
# the store itself is untouched
expect_ok st "$S" store fsck
echo PASS
