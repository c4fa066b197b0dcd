#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Every command, on success and on the main error paths, runs clean under
# valgrind memcheck: no invalid access, no use of uninitialised memory, no
# definite leak (exit 99 would say otherwise).
. "$(dirname "$0")/lib.sh"
need_root

command -v valgrind >/dev/null || skip "valgrind is not installed"
# An ASan build cannot run under valgrind; the plain build covers this test.
[ -z "${STRATA_SANITIZED:-}" ] || skip "sanitizer build"


S=$T/store
src=$T/src
mkdir -p "$src/d/e" "$src/empty"
rand_file "$src/d/r" 300000
text_file "$src/d/e/t" 200000
: >"$src/zero"
ln -s d/r "$src/link"
ln "$src/d/r" "$src/hard"
setfattr -n user.k -v v "$src/d/r"
chown 7:8 "$src/zero"
mkfifo "$src/fifo"

vg 0 --store "$S" layer pack -j 2 "$src"
d=$(tail -n 1 "$T/out")
[[ $d =~ $DIGEST_RE ]] || fail "pack printed no digest"
printf 'more' >>"$src/zero"
vg 0 --store "$S" layer pack -j 2 "$src"
d2=$(tail -n 1 "$T/out")
vg 0 --store "$S" layer unpack -j 2 "$d" "$T/dest"
[ "$(stat -c %u:%g "$T/dest/zero")" = 7:8 ] || fail "unpack under valgrind: owner"
cmp "$src/d/r" "$T/dest/d/r" || fail "unpack under valgrind: content"
vg 0 --store "$S" layer ls "$d"
vg 0 --store "$S" layer diff "$d" "$d2"
grep -q '^M /zero (content)$' "$T/out" || fail "diff under valgrind: $(cat "$T/out")"
vg 0 --store "$S" store stats
vg 0 --store "$S" store fsck -j 2

# error paths
vg 1 --store "$S" layer ls "sha256:$(printf 'none' | sha256sum | cut -c1-64)"
vg 1 --store "$S" layer ls "sha256:not-a-digest"
vg 1 --store "$T/nostore" layer ls "$d"
vg 1 --store "$S" layer pack "$T/missing-tree"
vg 2 --store "$S" layer unpack "$d"
chunk=$(object_path "$S" chunks "$(sha256sum <"$src/d/e/t" | cut -c1-64)")
if [ ! -f "$chunk" ]; then # t is larger than one chunk: take any chunk
  chunk=$(find "$S/chunks" -type f | head -n 1)
fi
flip_byte "$chunk" 20
vg 1 --store "$S" layer unpack -j 2 "$d" "$T/dest2"
[ ! -e "$T/dest2" ] || fail "failed unpack left $T/dest2"
vg 1 --store "$S" store fsck -j 2

# a build with run steps (over an overlay, and on the whole tree), and a
# failing run step
if command -v bwrap >/dev/null; then
  B=$T/b
  mkdir -p "$B/rootfs/bin"
  for b in sh rm; do
    cp -L "/bin/$b" "$B/rootfs/bin/$b"
    for lib in $(ldd "/bin/$b" | grep -o '/[^ ]*'); do
      mkdir -p "$B/rootfs$(dirname "$lib")"
      cp -L "$lib" "$B/rootfs$lib"
    done
  done
  printf 'x\n' >"$B/rootfs/gone"
  cat >"$B/r.yaml" <<'EOF2'
image: vg
layers:
  - name: root
    sources:
      - dir: ./rootfs
  - name: run
    run: ["echo made > /made; rm /gone"]
EOF2
  sed 's/rm \/gone/exit 4/' "$B/r.yaml" >"$B/fail.yaml"
  export TMPDIR=$T
  vg 0 --store "$T/bs" build -j 2 "$B/r.yaml"
  STRATA_RUN_OVERLAY=0 vg 0 --store "$T/bs2" build "$B/r.yaml"
  vg 1 --store "$T/bs" build "$B/fail.yaml"
fi
echo PASS
