#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Unpacking into an existing DEST never writes outside it: a symlink in DEST
# where the layer has a directory is refused; symlinks where the layer has a
# file, symlink or hardlink are replaced, not followed.
. "$(dirname "$0")/lib.sh"

S=$T/store
src=$T/src
mkdir -p "$src/sub/deeper" "$src/other"
printf 'payload' >"$src/sub/file"
printf 'deep' >"$src/sub/deeper/file"
printf 'top' >"$src/top-file"
ln -s top-file "$src/a-symlink"
printf 'linked' >"$src/other/hl1"
ln "$src/other/hl1" "$src/other/hl2"
d=$(pack "$S" "$src")

outside=$T/outside
mkdir -p "$outside"
outside_state() { find "$outside" -printf '%y %m %s %P\n' | sort; }
printf 'precious' >"$outside/file"
printf 'precious' >"$outside/top-file"
chmod 0640 "$outside/file"
outside_state >"$T/outside.before"
check_outside() {
  outside_state >"$T/outside.after"
  diff -u "$T/outside.before" "$T/outside.after" >&2 || fail "unpack changed $outside ($1)"
  [ "$(cat "$outside/file")" = precious ] || fail "unpack wrote into $outside/file ($1)"
}

# --- DEST/sub is a symlink to a directory outside DEST ---
dest=$T/dest1
mkdir "$dest"
ln -s "$outside" "$dest/sub"
expect_fail 1 "$dest/sub.*symlink|symlink.*$dest/sub" st "$S" layer unpack "$d" "$dest"
check_outside "directory symlink"
[ -L "$dest/sub" ] || fail "the symlink DEST/sub was removed"
# also with a relative symlink and one level deeper
dest=$T/dest2
mkdir -p "$dest/sub"
ln -s ../../outside "$dest/sub/deeper"
expect_fail 1 "$dest/sub/deeper.*symlink|symlink.*$dest/sub/deeper" st "$S" layer unpack "$d" "$dest"
check_outside "nested relative symlink"
[ -z "$(find "$outside" -name 'file' -newer "$T/outside.before")" ] || fail "outside file touched"

# --- DEST/sub is a regular file where the layer has a directory ---
dest=$T/dest3
mkdir "$dest"
printf 'not a dir' >"$dest/sub"
expect_fail 1 "$dest/sub" st "$S" layer unpack "$d" "$dest"

# --- symlinks where the layer has a file, a symlink, a hardlink: replaced ---
dest=$T/dest4
mkdir -p "$dest/sub" "$dest/other"
ln -s "$outside/file" "$dest/sub/file"
ln -s "$outside/top-file" "$dest/top-file"
ln -s "$outside/file" "$dest/a-symlink"
ln -s "$outside/file" "$dest/other/hl2"
ln -s "$outside" "$dest/other/hl1"
expect_ok st "$S" layer unpack "$d" "$dest"
check_outside "file symlinks"
assert_same_tree "$src" "$dest"

# --- DEST itself is a symlink: refused, target untouched ---
ln -s "$outside" "$T/dest5"
expect_fail 1 "$T/dest5" st "$S" layer unpack "$d" "$T/dest5"
check_outside "DEST is a symlink"

# --- layer symlinks pointing outside are created as links, never followed ---
src2=$T/src2
mkdir -p "$src2"
ln -s "$outside/file" "$src2/abs"
ln -s ../../../../../../../.. "$src2/up"
d2=$(pack "$S" "$src2")
expect_ok st "$S" layer unpack "$d2" "$T/dest6"
[ "$(readlink "$T/dest6/abs")" = "$outside/file" ] || fail "absolute symlink target changed"
[ "$(readlink "$T/dest6/up")" = ../../../../../../../.. ] || fail "relative symlink target changed"
check_outside "symlinks in the layer"
# unpacking the first layer over it: /abs and /up are not in that layer; no
# path of it goes through them
expect_ok st "$S" layer unpack "$d" "$T/dest6"
check_outside "second layer over symlinks"
echo PASS
