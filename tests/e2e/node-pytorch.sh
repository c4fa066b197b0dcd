#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# End to end on the node: recipes/debian-pytorch.yaml (cell scipy=no) is
# built into a fresh store, served by `strata serve` on 127.0.0.1, and
# pre-warmed into fresh node directories:
#
#   - prewarm --server into a fresh node, then `strata env run IMAGE -- python3
#     -c 'import torch; print(torch.__version__)'` prints the version the
#     python3-torch package carries; the repo fscks clean; a second prewarm
#     fetches nothing
#   - delta: a recipe change that touches only the top layer (a 3 MB file
#     added to `tools`): the prewarm commits one layer and fetches between the
#     compressed size of the data the node lacks (the chunks the rebuild added
#     to the store) and 1.1 x that plus the new index and manifest
#   - a corrupt chunk on the server: the prewarm fails naming it, commits
#     nothing for that layer, and succeeds after the store is repaired
#   - kill -9 half-way through a full prewarm into a second fresh node, then
#     two prewarms at once: both succeed (one waits for the other), together
#     they fetch exactly the chunks the killed run had not yet stored, the repo
#     fscks clean and torch imports
#
# Needs root, bubblewrap, ostree, dpkg and apt (Debian); the packages are
# fetched by tests/fixtures/fetch-pytorch-debs.sh into
# ${STRATA_FIXTURES:-/var/cache/strata-fixtures}. Skips (77) when they cannot
# be fetched because no Debian mirror is reachable. Needs ~6 GB under $TMPDIR.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
export TMPDIR=${TMPDIR:-/var/tmp}
. "$here/../cli/lib.sh"
. "$here/../cli/node-lib.sh"

src=${SRCDIR:-$(cd "$here/../.." && pwd -P)}
need_root
for t in bwrap dpkg-deb apt-get tar ostree; do
  command -v "$t" >/dev/null || skip "'$t' is not installed"
done

echo "fetching packages (tests/fixtures/fetch-pytorch-debs.sh)"
if ! debs=$("$src/tests/fixtures/fetch-pytorch-debs.sh" 2>"$T/fetch.err"); then
  tail -n 5 "$T/fetch.err" >&2
  if ! timeout 10 apt-get -qq --print-uris download python3 >/dev/null 2>&1; then
    skip "the Debian packages cannot be fetched (no mirror reachable)"
  fi
  fail "fetch-pytorch-debs.sh failed"
fi
torch_deb=$(ls "$debs"/pytorch-framework/python3-torch_*.deb)
py_version=$(dpkg-deb --fsys-tarfile "$torch_deb" |
  tar -xO ./usr/lib/python3/dist-packages/torch/version.py |
  sed -n "s/^__version__ = '\(.*\)'\$/\1/p")
[ -n "$py_version" ] || fail "no __version__ in $torch_deb"

# The recipe in a directory of its own (the delta steps edit it), its debs linked.
R=$T/recipe
mkdir -p "$R"
cp "$src/recipes/debian-pytorch.yaml" "$R/r.yaml"
ln -s "$debs" "$R/debs"
add_delta_file() { # NAME BYTES: a file source added to the tools layer
  rand_file "$R/$1" "$2"
  python3 - "$R/r.yaml" "$1" <<'PY'
import sys
p, name = sys.argv[1], sys.argv[2]
s = open(p).read()
anchor = "      - deb: ./debs/pytorch-tools-scipy-${scipy}/*.deb\n"
assert anchor in s
s = s.replace(anchor, anchor + "      - file: ./%s\n        dest: /opt/%s\n" % (name, name))
open(p, "w").write(s)
PY
}
IMG=debian-pytorch:1.13-scipy-no
S=$T/store
echo "building $IMG into a fresh store"
t0=$SECONDS
expect_ok st "$S" build --cell scipy=no "$R/r.yaml"
echo "  ($((SECONDS - t0)) s)"
start_server "$S"
echo "serving $S on $ADDR"

N=$T/node
pw() { "$STRATA" prewarm --node-dir "$1" --server "$ADDR" --json "$IMG"; }
t0=$SECONDS
expect_ok pw "$N"
echo "prewarm: $(cat "$T/out" | tr -d '\n' | tr -s ' ') ($((SECONDS - t0)) s)"
[ "$(jfield result)" = prewarmed ] && [ "$(jfield layers_committed)" = 3 ] || fail "prewarm: $(cat "$T/out")"
total_chunks=$(jfield chunks_needed)
ofsck "$N"
expect_ok "$STRATA" env run --node-dir "$N" "$IMG" -- python3 -c 'import torch; print(torch.__version__)'
[ "$(cat "$T/out")" = "$py_version" ] || fail "import torch printed '$(cat "$T/out")', want $py_version"
echo "ok: env run: import torch -> $(cat "$T/out")"
expect_ok pw "$N"
[ "$(jfield result)" = ready ] && [ "$(jfield bytes_fetched)" = 0 ] || fail "second prewarm: $(cat "$T/out")"
echo "ok: second prewarm fetched nothing ($(jfield seconds) s)"

# --- delta: only the top layer changes ---------------------------------------
find "$S/chunks" -type f | sort >"$T/chunks.before"
add_delta_file delta1.bin 3000000
expect_ok st "$S" build --cell scipy=no "$R/r.yaml"
grep -qE '^  \[1/3\] base +cached' "$T/out" && grep -qE '^  \[2/3\] framework +cached' "$T/out" &&
  grep -qE '^  \[3/3\] tools +built' "$T/out" || fail "delta build: $(cat "$T/out")"
img2=$(awk -v t="$IMG" '$1 == t && $2 ~ /^sha256:/ {print $2}' "$T/out")
find "$S/chunks" -type f | sort >"$T/chunks.after"
new_bytes=$(comm -13 "$T/chunks.before" "$T/chunks.after" | xargs -r stat -c %s | awk '{s += $1} END {print s + 0}')
expect_ok st "$S" inspect "$IMG"
tools2=$(awk '$1 == "tools" {print $2}' "$T/out")
meta=$(($(stat -c %s "$(object_path "$S" indexes "$tools2")") + $(stat -c %s "$(object_path "$S" manifests "$img2")")))
expect_ok pw "$N"
echo "delta: $(cat "$T/out" | tr -d '\n' | tr -s ' ')"
[ "$(jfield layers_committed)" = 1 ] || fail "delta committed: $(cat "$T/out")"
f=$(jfield bytes_fetched)
echo "delta: fetched $f bytes; new chunk data $new_bytes bytes, index + manifest $meta bytes"
[ "$f" -ge "$new_bytes" ] || fail "delta fetched $f bytes, less than the $new_bytes new"
[ "$f" -le $((new_bytes * 11 / 10 + meta)) ] || fail "delta fetched $f bytes > 1.1 x $new_bytes + $meta"
cmp "$R/delta1.bin" "$N/checkouts/${img2#sha256:}/opt/delta1.bin" || fail "delta content"
# the rebuilt layer's unchanged files come from the file map, not rewritten
[ "$(jfield files_reused)" -ge $(($(jfield files) / 2)) ] ||
  fail "delta rewrote the unchanged files: $(jfield files_reused) of $(jfield files) reused"
expect_ok "$STRATA" env run --node-dir "$N" "$IMG" -- python3 -c 'import torch; print(torch.__version__)'
[ "$(cat "$T/out")" = "$py_version" ] || fail "after the delta: '$(cat "$T/out")'"

# --- a corrupt chunk on the server ------------------------------------------
find "$S/chunks" -type f | sort >"$T/chunks.before"
add_delta_file delta2.bin 1000000
expect_ok st "$S" build --cell scipy=no "$R/r.yaml"
img3=$(awk -v t="$IMG" '$1 == t && $2 ~ /^sha256:/ {print $2}' "$T/out")
expect_ok st "$S" inspect "$IMG"
tools3=$(awk '$1 == "tools" {print $2}' "$T/out")
find "$S/chunks" -type f | sort >"$T/chunks.after"
obj=$(comm -13 "$T/chunks.before" "$T/chunks.after" | head -n 1)
[ -n "$obj" ] || fail "the rebuild stored no new chunk"
cp "$obj" "$T/good-chunk"
flip_byte "$obj" 20
expect_fail 1 "$(basename "$obj")" "$STRATA" prewarm --node-dir "$N" --server "$ADDR" "$IMG"
echo "ok: corrupt chunk: $(cat "$T/err")"
ostree refs --repo="$N/repo" >"$T/refs"
grep -q "${tools3#sha256:}" "$T/refs" && fail "the layer with the corrupt chunk was committed"
grep -q "${img3#sha256:}" "$T/refs" && fail "the image with the corrupt chunk was committed"
cp "$T/good-chunk" "$obj"
expect_ok pw "$N"
[ "$(jfield result)" = prewarmed ] || fail "after repair: $(cat "$T/out")"
ofsck "$N"
echo "ok: after the repair the prewarm succeeds"

# --- kill -9 half-way, then two prewarms at once ------------------------------
N2=$T/node2
"$STRATA" prewarm --node-dir "$N2" --server "$ADDR" --streams 1 "$IMG" >/dev/null 2>&1 &
pk=$!
wait_until 600 sh -c "[ \$(find '$N2/cache/chunks' -type f 2>/dev/null | wc -l) -ge 2000 ]" ||
  fail "the prewarm stored no chunks"
kill -9 "$pk"
wait "$pk" 2>/dev/null || true
have=$(find "$N2/cache/chunks" -type f | wc -l)
total=$(jfield chunks_needed)
echo "killed with $have of $total chunks in the cache"
[ "$have" -lt "$total" ] || fail "the prewarm finished before the kill"
[ ! -d "$N2/repo" ] || ofsck "$N2"
"$STRATA" prewarm --node-dir "$N2" --server "$ADDR" --json "$IMG" >"$T/a.json" 2>"$T/a.err" &
pa=$!
"$STRATA" prewarm --node-dir "$N2" --server "$ADDR" --json "$IMG" >"$T/b.json" 2>"$T/b.err" &
pb=$!
wait "$pa" || fail "first concurrent prewarm: $(cat "$T/a.err")"
wait "$pb" || fail "second concurrent prewarm: $(cat "$T/b.err")"
cat "$T/a.err" "$T/b.err" | grep -q 'waiting for node' || fail "neither prewarm waited for the other"
sum=$(python3 -c 'import json,sys; print(sum(json.load(open(f))["images"][0]["chunks_fetched"] for f in sys.argv[1:]))' "$T/a.json" "$T/b.json")
[ "$sum" -eq $((total - have)) ] || fail "after the kill $sum chunks were fetched, $((total - have)) were missing"
ofsck "$N2"
expect_ok "$STRATA" env run --node-dir "$N2" "$IMG" -- python3 -c 'import torch; print(torch.__version__)'
[ "$(cat "$T/out")" = "$py_version" ] || fail "node2: '$(cat "$T/out")'"
echo "ok: kill -9 and two concurrent prewarms: $sum chunks fetched after the kill, torch imports"
echo PASS
