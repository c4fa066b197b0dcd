#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kill -9 during a pack never leaves a partial object: fsck passes, the dead
# process's temp files are removed on the next open (and only those), and
# packing again completes with the same digest as a clean pack.
. "$(dirname "$0")/lib.sh"

src=$T/src
mkdir -p "$src/r" "$src/c"
# ~290 MB: half incompressible, half compressible, in 5 MB files
for i in $(seq 0 28); do
  rand_file "$src/r/$i" 5000000
  text_file "$src/c/$i" 5000000 "$i"
done
ref=$(pack "$T/ref" "$src")
rm -rf "$T/ref"

has_files() { [ -n "$(find "$1" -type f -print -quit 2>/dev/null)" ]; }

# kill_pack STORE WHERE DELAY: start a pack, wait until WHERE (tmp or chunks)
# holds a file, wait DELAY more seconds, kill -9.
kill_pack() {
  local store=$1 where=$2 delay=$3 pid krc=0
  "$STRATA" --store "$store" layer pack "$src" >"$T/kout" 2>"$T/kerr" &
  pid=$!
  if ! wait_until 60 has_files "$store/$where"; then
    kill -9 "$pid" 2>/dev/null || true
    fail "pack wrote nothing to $store/$where within 60 s"
  fi
  [ "$delay" = 0 ] || sleep "$delay" # a chosen kill point, not a synchronisation
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" || krc=$?
  if [ "$krc" -eq 0 ]; then
    echo "note: pack finished before the kill ($where +$delay s)"
  elif [ "$krc" -ne 137 ]; then
    cat "$T/kerr" >&2
    fail "killed pack exited $krc, want 137"
  fi
  return 0
}

n=0
for point in tmp:0 tmp:0.3 tmp:0.9 chunks:0; do
  n=$((n + 1))
  S=$T/store$n
  kill_pack "$S" "${point%%:*}" "${point#*:}"
  staged=$(count_files "$S/tmp")
  published=$(count_files "$S/chunks")
  echo "kill at $point: $staged temp files, $published chunks published"
  # an index is only ever visible complete: the one of the whole tree
  find "$S/indexes" -type f -printf 'sha256:%f\n' >"$T/indexes" 2>/dev/null || true
  while read -r f; do
    [ "$f" = "$ref" ] || fail "a killed pack left a foreign index $f"
  done <"$T/indexes"
  expect_ok st "$S" store fsck
  grep -q ': ok$' "$T/out" || fail "fsck after kill: $(cat "$T/out")"
  assert_empty_dir "$S/tmp"
  d=$(pack "$S" "$src")
  [ "$d" = "$ref" ] || fail "pack after kill at $point gave $d, want $ref"
  expect_ok st "$S" store fsck
  grep -q "checked [0-9]* chunks, 1 indexes" "$T/out" || fail "fsck: $(cat "$T/out")"
  assert_empty_dir "$S/tmp"
  expect_ok st "$S" layer unpack "$d" "$T/dest"
  cmp -s "$src/r/7" "$T/dest/r/7" || fail "unpacked content differs"
  cmp -s "$src/c/28" "$T/dest/c/28" || fail "unpacked content differs"
  rm -rf "$S" "$T/dest"
done

# Only temp files of dead processes are removed on open; a live writer's and
# files that are not ours stay.
S=$T/store-tmp
mkdir -p "$S/tmp"
expect_ok st "$S" store init
sleep 0 &
dead=$!
wait "$dead"
hex=$(printf 'x' | sha256sum | cut -c1-64)
: >"$S/tmp/$hex.0.$dead.0"
: >"$S/tmp/$hex.1.$dead.17"
: >"$S/tmp/$hex.0.$$.0"
: >"$S/tmp/unrelated-file"
expect_ok st "$S" store stats
for f in "$hex.0.$dead.0" "$hex.1.$dead.17"; do
  [ ! -e "$S/tmp/$f" ] || fail "temp file $f of dead pid $dead was not removed"
done
[ -e "$S/tmp/$hex.0.$$.0" ] || fail "the temp file of a live process was removed"
[ -e "$S/tmp/unrelated-file" ] || fail "an unrelated file in tmp/ was removed"
echo PASS
