#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata prewarm from a local store into a fresh node directory: the checkout
# is the image's composed tree (whiteouts applied) and the repo fscks clean;
# a second run is a no-op that fetches nothing; a change to the top layer
# fetches only its new data; a corrupt chunk fails naming it and commits
# nothing for its layer, and a re-run after the repair fetches only what is
# still missing; bad input fails with one clear line.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node-lib.sh"
need_root
command -v ostree >/dev/null || skip "ostree not installed"

W=$T/w
mkdir -p "$W/app"
tiny_root "$W/rootfs"
rand_file "$W/app/data" 300000
printf 'hello\n' >"$W/app/hello"
tiny_recipe "$W" v1
S=$T/store
N=$T/node
cd "$W"
expect_ok st "$S" build r.yaml
img1=$(awk '$1 == "tiny:v1" && $2 ~ /^sha256:/ {print $2}' "$T/out")
[[ $img1 =~ $DIGEST_RE ]] || fail "build printed no digest"

# --- first prewarm ---
prewarm_json "$N" "$S" tiny:v1
[ "$(jfield result)" = prewarmed ] || fail "result: $(cat "$T/out")"
[ "$(jfield digest)" = "$img1" ] || fail "digest: $(cat "$T/out")"
[ "$(jfield layers_committed)" = 2 ] || fail "layers committed: $(cat "$T/out")"
[ "$(jfield bytes_reused)" = 0 ] || fail "a fresh node reused bytes: $(cat "$T/out")"
fetched1=$(jfield bytes_fetched)
[ "$fetched1" -gt 300000 ] || fail "fetched only $fetched1 bytes"
ofsck "$N"
co=$N/checkouts/${img1#sha256:}
[ -d "$co" ] || fail "no checkout at $co"
expect_ok st "$S" export tiny:v1 "$T/export"
tree_manifest_nolinks "$T/export" >"$T/m.export"
tree_manifest_nolinks "$co" >"$T/m.checkout"
diff -u "$T/m.export" "$T/m.checkout" || fail "checkout differs from strata export"
[ ! -e "$co/bin/touch" ] || fail "whiteout of /bin/touch not applied"
ostree refs --repo="$N/repo" >"$T/refs"
[ "$(grep -c '^strata/layer/' "$T/refs")" -eq 2 ] || fail "layer refs: $(cat "$T/refs")"
grep -qx "strata/image/${img1#sha256:}" "$T/refs" || fail "no image ref: $(cat "$T/refs")"
expect_ok "$STRATA" env ls --node-dir "$N"
grep -q "^tiny:v1 .*sha256:${img1:7:12}" "$T/out" || fail "env ls: $(cat "$T/out")"

# --- nothing new: nothing fetched, ready ---
prewarm_json "$N" "$S" tiny:v1
[ "$(jfield result)" = ready ] || fail "second run: $(cat "$T/out")"
[ "$(jfield bytes_fetched)" = 0 ] || fail "second run fetched: $(cat "$T/out")"
# the human summary
expect_ok "$STRATA" prewarm --node-dir "$N" --from-store "$S" --image tiny:v1
grep -q "^tiny:v1 $img1 ready: fetched 0 B" "$T/out" || fail "summary: $(cat "$T/out")"

# --- delta: only the top layer changed ---
rand_file "$W/app/new" 200000
tiny_recipe "$W" v2
expect_ok st "$S" build r.yaml
img2=$(awk '$1 == "tiny:v2" && $2 ~ /^sha256:/ {print $2}' "$T/out")
expect_ok st "$S" inspect tiny:v2
app2=$(awk '$1 == "app" {print $2}' "$T/out")
idx_bytes=$(stat -c %s "$(object_path "$S" indexes "$app2")")
man_bytes=$(stat -c %s "$(object_path "$S" manifests "$img2")")
prewarm_json "$N" "$S" tiny:v2
[ "$(jfield layers_committed)" = 1 ] || fail "delta committed: $(cat "$T/out")"
f=$(jfield bytes_fetched)
new=200000
[ "$f" -ge "$new" ] || fail "delta fetched $f bytes, less than the $new new bytes"
max=$((new * 11 / 10 + idx_bytes + man_bytes))
[ "$f" -le "$max" ] || fail "delta fetched $f bytes, more than 1.1 x $new + index + manifest ($max)"
[ "$(jfield bytes_reused)" -ge 300000 ] || fail "delta reused: $(cat "$T/out")"
cmp "$W/app/new" "$N/checkouts/${img2#sha256:}/app/new" || fail "new file content"
ofsck "$N"

# --- a corrupt chunk in the source ---
rand_file "$W/app/new" 100000 # replaces v2's new file
tiny_recipe "$W" v3
expect_ok st "$S" build r.yaml
img3=$(awk '$1 == "tiny:v3" && $2 ~ /^sha256:/ {print $2}' "$T/out")
expect_ok st "$S" inspect tiny:v3
app3=$(awk '$1 == "app" {print $2}' "$T/out")
chash=$(sha256sum <"$W/app/new" | cut -c1-64) # one chunk: smaller than chunk-min? no: find it
expect_ok st "$S" layer ls "$app3"
obj=$(object_path "$S" chunks "$chash")
[ -f "$obj" ] || {
  # a file over the minimum chunk size has several chunks: corrupt the first new one
  obj=""
  for c in "$S"/chunks/*/*; do
    h=$(basename "$c")
    [ -e "$(object_path "$N/cache" chunks "$h")" ] || { obj=$c; break; }
  done
}
[ -n "$obj" ] || fail "no new chunk found to corrupt"
chex=$(basename "$obj")
cp "$obj" "$T/good-chunk"
chmod u+w "$obj"
flip_byte "$obj" $(($(stat -c %s "$obj") / 2))
expect_fail 1 "chunk $chex" "$STRATA" prewarm --node-dir "$N" --from-store "$S" tiny:v3
grep -q "tiny:v3" "$T/err" || fail "the error does not name the image: $(cat "$T/err")"
ostree refs --repo="$N/repo" >"$T/refs"
grep -q "strata/layer/${app3#sha256:}" "$T/refs" && fail "the layer with the corrupt chunk was committed"
grep -q "strata/image/${img3#sha256:}" "$T/refs" && fail "an image with a corrupt chunk was committed"
[ ! -e "$N/checkouts/${img3#sha256:}" ] || fail "checkout of a failed prewarm"
[ ! -e "$(object_path "$N/cache" chunks "$chex")" ] || fail "the corrupt chunk entered the cache"
expect_fail 1 "not pre-warmed" "$STRATA" env run --node-dir "$N" tiny:v3
ofsck "$N"
cp "$T/good-chunk" "$obj"
prewarm_json "$N" "$S" tiny:v3
[ "$(jfield result)" = prewarmed ] || fail "after repair: $(cat "$T/out")"
[ "$(jfield chunks_fetched)" -ge 1 ] || fail "after repair nothing fetched"
cmp "$W/app/new" "$N/checkouts/${img3#sha256:}/app/new" || fail "repaired content"
ofsck "$N"

# --- several images at once, and bad input ---
expect_ok "$STRATA" prewarm --node-dir "$N" --from-store "$S" --image tiny:v1 tiny:v2 --json
[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["images"]))' "$T/out")" = 2 ] ||
  fail "two images: $(cat "$T/out")"
printf '# images for this node\ntiny:v1\n\n  tiny:v3  # comment\n' >"$T/list"
expect_ok "$STRATA" prewarm --node-dir "$N" --from-store "$S" --images-from "$T/list"
[ "$(grep -c ' ready: ' "$T/out")" -eq 2 ] || fail "--images-from: $(cat "$T/out")"
expect_fail 2 "no image given" "$STRATA" prewarm --node-dir "$N" --from-store "$S"
expect_fail 2 "exactly one of" "$STRATA" prewarm --node-dir "$N" tiny:v1
expect_fail 2 "invalid --max-rate" "$STRATA" prewarm --node-dir "$N" --from-store "$S" --max-rate x tiny:v1
expect_fail 1 "images file $T/nolist" "$STRATA" prewarm --node-dir "$N" --from-store "$S" --images-from "$T/nolist"
expect_fail 1 "image tiny:nope not found in store $S" "$STRATA" prewarm --node-dir "$N" --from-store "$S" tiny:nope
expect_fail 1 "$T/nostore" "$STRATA" prewarm --node-dir "$N" --from-store "$T/nostore" tiny:v1
expect_fail 1 "tiny:nope" "$STRATA" prewarm --node-dir "$N" --from-store "$S" --json tiny:v1 tiny:nope
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["result"]=="failed"; assert d["images"][0]["result"]=="ready"; assert d["images"][1]["result"]=="failed" and "tiny:nope" in d["images"][1]["error"]' "$T/out" ||
  fail "json of a partly failed run: $(cat "$T/out")"
echo PASS
