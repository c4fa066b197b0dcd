#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# pack -> unpack gives back the same tree (types, modes incl. setuid/setgid/
# sticky, owners, contents, symlinks, hardlink groups, xattrs); digests are
# deterministic and sensitive to metadata; ls/diff describe layers; FIFOs and
# sockets are skipped with a warning.
. "$(dirname "$0")/lib.sh"
need_root

S=$T/store
src=$T/src
mkdir -p "$src"
cd "$src"

# --- the tree ---
mkdir -p a/b/c 'dir with spaces/inner' 'ünïcødé-δ/日本' empty
: >empty-file
rand_file size1 1
rand_file a/size16k-1 $((16 * 1024 - 1))
rand_file a/b/size64k $((64 * 1024))
rand_file a/b/c/size300k $((300 * 1024))
rand_file big3m $((3 * 1024 * 1024))
text_file a/text200k $((200 * 1024)) 1
cp a/text200k a/b/dup-of-text200k # same content, deduplicated chunks
printf 'x' >'dir with spaces/a file'
printf 'y' >'ünïcødé-δ/日本/файл'
printf 'z' >"$(printf 'new\nline')"
ln -s a/b/size64k rel-link
ln -s /etc/hostname abs-link
ln -s does/not/exist dangling-link
ln -s ../../size1 a/b/up-link
ln -s 'dir with spaces' 'link to dir'
printf 'pair' >hl-pair-1
ln hl-pair-1 a/hl-pair-2
rand_file hl-triple-1 5000
ln hl-triple-1 a/b/hl-triple-2
ln hl-triple-1 'dir with spaces/hl-triple-3'
printf 'suid' >setuid-file
chmod 4755 setuid-file
printf 'sgid' >setgid-file
chmod 2711 setgid-file
mkdir sticky-dir setgid-dir ro-dir private-dir
chmod 1777 sticky-dir
chmod 2775 setgid-dir
printf 'in ro dir' >ro-dir/f
chmod 0555 ro-dir
printf 'in private dir' >private-dir/f
chmod 0700 private-dir
printf 'secret' >readonly-file
chmod 0400 readonly-file
printf 'owned' >owned-file
chown 1234:5678 owned-file
mkdir owned-dir
chown 4321:8765 owned-dir
chown -h 1111:2222 rel-link
setfattr -n user.alpha -v 'one' a/size16k-1
setfattr -n user.beta -v 0x00ff00 a/size16k-1
setfattr -n user.dir -v 'on a dir' a/b
setfattr -n user.empty-value a/b/size64k
setfattr -n user.big -v "0x$(head -c 3000 /dev/urandom | od -An -tx1 | tr -d ' \n')" big3m
chmod 0750 .
cd /

# --- pack, deterministic ---
d1=$(pack "$S" "$src")
d2=$(pack "$S" "$src")
[ "$d1" = "$d2" ] || fail "packing twice gave $d1 and $d2"
grep -q '^chunks: .* 0 new' "$T/err" || fail "second pack stored new chunks: $(cat "$T/err")"
d3=$(pack "$T/store2" "$src")
[ "$d1" = "$d3" ] || fail "packing into a fresh store gave $d3, want $d1"
[ -f "$(object_path "$S" indexes "$d1")" ] || fail "no index file for $d1"
expect_ok st "$S" store fsck
grep -q ': ok$' "$T/out" || fail "fsck output: $(cat "$T/out")"

# --- unpack into a new dest, and into an existing empty dir ---
expect_ok st "$S" layer unpack "$d1" "$T/out1"
assert_same_tree "$src" "$T/out1"
check_mtimes "$T/out1" 0
assert_no_unpack_tmp "$T"
mkdir "$T/out2"
expect_ok st "$S" layer unpack "$d1" "$T/out2"
assert_same_tree "$src" "$T/out2"
# the unpacked tree packs to the very same layer
d4=$(pack "$S" "$T/out1")
[ "$d1" = "$d4" ] || fail "repacking the unpacked tree gave $d4, want $d1"

# --- --no-chown: everything belongs to the caller ---
expect_ok st "$S" layer unpack --no-chown "$d1" "$T/out3"
[ "$(stat -c %u:%g "$T/out3/owned-file")" = "0:0" ] || fail "--no-chown kept the owner"
[ "$(stat -c %a "$T/out3/setuid-file")" = 4755 ] || fail "--no-chown lost the setuid bit"

# --- SOURCE_DATE_EPOCH and --keep-mtime ---
d5=$(SOURCE_DATE_EPOCH=1700000000 pack "$S" "$src")
[ "$d5" != "$d1" ] || fail "SOURCE_DATE_EPOCH did not change the digest"
expect_ok st "$S" layer unpack "$d5" "$T/out5"
check_mtimes "$T/out5" 1700000000
assert_same_tree "$src" "$T/out5"
touch -h -d @1600000000 "$src/rel-link"
touch -d @1500000000 "$src/a/b/size64k"
d6=$(pack "$S" "$src" --keep-mtime)
expect_ok st "$S" layer unpack "$d6" "$T/out6"
[ "$(stat -c %Y "$T/out6/a/b/size64k")" = 1500000000 ] || fail "--keep-mtime lost a file mtime"
[ "$(stat -c %Y "$T/out6/rel-link")" = 1600000000 ] || fail "--keep-mtime lost a symlink mtime"
d7=$(pack "$S" "$src")
[ "$d7" = "$d1" ] || fail "changing mtimes changed the normalised digest"

# --- --owner-root ---
d8=$(pack "$S" "$src" --owner-root)
expect_ok st "$S" layer ls "$d8"
grep -Eq ' 1234/' "$T/out" && fail "--owner-root kept uid 1234"
grep -Eq '^-rw-r--r-- +0/0 +5 /owned-file$' "$T/out" || fail "--owner-root: $(grep owned-file "$T/out")"

# --- layer ls lists every path ---
expect_ok st "$S" layer ls "$d1"
cp "$T/out" "$T/ls"
(cd "$src" && find . ! -name "$(printf 'new\nline')" -printf '%P\n') | while IFS= read -r p; do
  grep -Fq " /$p" "$T/ls" || fail "layer ls does not list /$p"
done
[ "$(grep -c . "$T/ls")" -eq "$(find "$src" | wc -l)" ] ||
  fail "layer ls: $(grep -c . "$T/ls") lines for $(find "$src" | wc -l) entries"
grep -Fq ' /rel-link -> a/b/size64k' "$T/ls" || fail "ls: symlink target"
grep -Eq '^-rwsr-xr-x +0/0 +4 /setuid-file$' "$T/ls" || fail "ls: setuid file"
grep -Eq '^drwxrwxrwt .* /sticky-dir$' "$T/ls" || fail "ls: sticky dir"
grep -Eq '^-rw-r--r-- +1234/5678 +5 /owned-file$' "$T/ls" || fail "ls: owned file"
grep -Eq '^h.* /a/hl-pair-2 link to /hl-pair-1$|^h.* /hl-pair-1 link to /a/hl-pair-2$' "$T/ls" ||
  fail "ls: hardlink pair"
[ "$(grep -c '^h' "$T/ls")" -eq 3 ] || fail "ls: want 3 hardlink entries"

# --- a mode change is a new layer, and diff names it ---
chmod 0600 "$src/a/b/size64k"
dm=$(pack "$S" "$src")
[ "$dm" != "$d1" ] || fail "chmod did not change the digest"
expect_ok st "$S" layer diff "$d1" "$dm"
[ "$(cat "$T/out")" = "M /a/b/size64k (mode)" ] || fail "diff: $(cat "$T/out")"
grep -q '0 added, 0 removed, 1 modified' "$T/err" || fail "diff summary: $(cat "$T/err")"
expect_ok st "$S" layer diff "$d1" "$d1"
[ ! -s "$T/out" ] || fail "diff of a layer with itself: $(cat "$T/out")"
# content, owner, xattr, added and removed
chmod 0644 "$src/a/b/size64k"
printf 'changed' >>"$src/size1"
chown 1:1 "$src/a/text200k"
setfattr -n user.alpha -v 'two' "$src/a/size16k-1"
printf 'new' >"$src/added"
rm "$src/dangling-link"
dc=$(pack "$S" "$src")
expect_ok st "$S" layer diff "$d1" "$dc"
cat >"$T/want" <<'EOF'
M /a/size16k-1 \(xattrs\)
M /a/text200k \(owner\)
-.* /dangling-link -> does/not/exist
\+.* /added
M /size1 \(content\)
EOF
sort "$T/out" >"$T/got"
grep -c . "$T/got" | grep -qx 5 || fail "diff: $(cat "$T/out")"
while IFS= read -r pat; do
  grep -Eq "^$pat\$" "$T/got" || fail "diff lacks /$pat/: $(cat "$T/out")"
done <"$T/want"

# --- FIFOs and sockets are skipped with a warning naming them ---
rm -rf "$T/src"
mkdir -p "$T/sp/d"
printf 'a' >"$T/sp/d/file"
dplain=$(pack "$S" "$T/sp")
mkfifo "$T/sp/d/a-fifo"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$T/sp/a-socket"
[ -S "$T/sp/a-socket" ] || fail "could not make a socket"
dspecial=$(pack "$S" "$T/sp")
grep -Eq "warn.*$T/sp/d/a-fifo" "$T/err" || fail "no warning naming the FIFO: $(cat "$T/err")"
grep -Eq "warn.*$T/sp/a-socket" "$T/err" || fail "no warning naming the socket: $(cat "$T/err")"
[ "$dspecial" = "$dplain" ] || fail "skipped entries changed the digest"
expect_ok st "$S" store fsck
echo PASS
