#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Several strata processes on one store at once: packs of the same tree and
# of different trees all succeed with the digests a lone pack gives, fsck
# running meanwhile never sees a partial object, and the store ends up sound.
. "$(dirname "$0")/lib.sh"

mk_tree() { # DIR SEED
  mkdir -p "$1/shared" "$1/own"
  local i
  for i in 0 1 2 3; do
    rand_file "$1/own/r$i" 6000000
    text_file "$1/own/t$i" 4000000 "$2$i"
  done
  # identical in every tree: chunks shared between concurrent writers
  cp "$T/shared-blob" "$1/shared/blob"
}
rand_file "$T/shared-blob" 8000000
mk_tree "$T/a" a
mk_tree "$T/b" b
mk_tree "$T/c" c
ref_a=$(pack "$T/ref" "$T/a")
ref_b=$(pack "$T/ref" "$T/b")
ref_c=$(pack "$T/ref" "$T/c")
rm -rf "$T/ref"

# bg_pack NAME STORE TREE: start a pack in the background (pid in pids[NAME])
declare -A pids=()
bg_pack() {
  "$STRATA" --store "$2" layer pack "$3" >"$T/$1.out" 2>"$T/$1.err" &
  pids[$1]=$!
}
# join NAME WANT: the pack exited 0 and printed digest WANT
join() {
  local rc=0
  wait "${pids[$1]}" || rc=$?
  [ "$rc" -eq 0 ] || fail "concurrent pack $1 exited $rc: $(cat "$T/$1.err")"
  [ "$(tail -n 1 "$T/$1.out")" = "$2" ] || fail "concurrent pack $1 gave $(tail -n 1 "$T/$1.out"), want $2"
}
store_sound() {
  expect_ok st "$1" store fsck
  grep -q ": ok$" "$T/out" || fail "fsck: $(cat "$T/out")"
  assert_empty_dir "$1/tmp"
}

# --- the same tree twice at once ---
for round in 1 2; do
  S=$T/same$round
  expect_ok st "$S" store init
  bg_pack x "$S" "$T/a"
  bg_pack y "$S" "$T/a"
  join x "$ref_a"
  join y "$ref_a"
  store_sound "$S"
  rm -rf "$S"
done

# --- three different trees at once, with fsck running meanwhile ---
S=$T/diff
expect_ok st "$S" store init
bg_pack a "$S" "$T/a"
bg_pack b "$S" "$T/b"
bg_pack c "$S" "$T/c"
checks=0
while kill -0 "${pids[a]}" 2>/dev/null || kill -0 "${pids[b]}" 2>/dev/null ||
  kill -0 "${pids[c]}" 2>/dev/null; do
  run st "$S" store fsck
  [ "$rc" -eq 0 ] || fail "fsck during concurrent packs: $(cat "$T/out" "$T/err")"
  checks=$((checks + 1))
done
echo "fsck ran $checks times during the packs"
join a "$ref_a"
join b "$ref_b"
join c "$ref_c"
store_sound "$S"
grep -q 'checked [0-9]* chunks, 3 indexes' "$T/out" || fail "fsck: $(cat "$T/out")"
# and all three unpack to their trees, two of them at once
"$STRATA" --store "$S" layer unpack "$ref_a" "$T/out-a" 2>"$T/ua.err" &
ua=$!
"$STRATA" --store "$S" layer unpack "$ref_b" "$T/out-b" 2>"$T/ub.err" &
ub=$!
wait "$ua" || fail "concurrent unpack a: $(cat "$T/ua.err")"
wait "$ub" || fail "concurrent unpack b: $(cat "$T/ub.err")"
expect_ok st "$S" layer unpack "$ref_c" "$T/out-c"
assert_same_tree "$T/a" "$T/out-a"
assert_same_tree "$T/b" "$T/out-b"
assert_same_tree "$T/c" "$T/out-c"
rm -rf "$S" "$T"/out-?

# --- two packs creating the same new store at once ---
# Both must succeed: neither may see the other's half-initialised store.
mkdir -p "$T/tiny"
printf 'tiny' >"$T/tiny/f"
ref_tiny=$(pack "$T/ref" "$T/tiny")
for attempt in $(seq 1 30); do
  S=$T/new$attempt
  bg_pack p "$S" "$T/tiny"
  bg_pack q "$S" "$T/tiny"
  join p "$ref_tiny"
  join q "$ref_tiny"
  store_sound "$S"
done
echo PASS
