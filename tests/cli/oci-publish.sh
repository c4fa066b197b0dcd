#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata publish --oci: the layout is read by skopeo (inspect, copy) and
# umoci (unpack gives exactly the root file system strata export gives:
# contents, modes, owners, symlinks, hardlinks, xattrs, deletions); the same
# image gives the same manifest digest from another store; a republish
# makes nothing; tags accumulate in one layout; --zstd; gzip layers of
# several blocks are the same with any number of threads; bad input.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root
oci_tools

oci_build_demo

# --- publish, and what skopeo sees ---
expect_ok "$STRATA" --store "$S" publish demo:1 --oci "$T/lay"
man=$(tail -n 1 "$T/out")
[[ $man =~ $DIGEST_RE ]] || fail "publish printed no digest: $man"
grep -q "2 layers (2 made" "$T/err" || fail "summary: $(cat "$T/err")"
[ "$(manifest_digest_of_tag "$T/lay" 1)" = "$man" ] || fail "index.json does not name $man as 1"
expect_ok skopeo inspect "oci:$T/lay:1"
python3 - "$T/out" "$man" <<'P' || fail "skopeo inspect: $(cat "$T/out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["Digest"] == sys.argv[2], j["Digest"]
assert len(j["Layers"]) == 2, j["Layers"]
assert j["Labels"] == {"cuda": "12.4", "framework": "none"}, j["Labels"]
assert sorted(j["Env"]) == ["LANG=C.UTF-8", "PATH=/usr/bin:/bin"], j["Env"]
P
expect_ok skopeo inspect --config "oci:$T/lay:1"
python3 - "$T/out" <<'P' || fail "config: $(cat "$T/out")"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["config"]["Entrypoint"] == ["/bin/sh", "-c"]
assert c["config"]["WorkingDir"] == "/srv"
assert c["rootfs"]["type"] == "layers" and len(c["rootfs"]["diff_ids"]) == 2
P
expect_ok skopeo copy "oci:$T/lay:1" "dir:$T/copy"
[ "$(find "$T/copy" -type f | wc -l)" -ge 4 ] || fail "skopeo copy wrote too little"
# the gzip layers really are the diff_ids' tars
for b in $(python3 -c 'import json,sys; print(" ".join(l["digest"][7:] for l in json.load(open(sys.argv[1]))["layers"]))' "$T/lay/blobs/sha256/${man#sha256:}"); do
  gzip -t "$T/lay/blobs/sha256/$b" || fail "layer $b is not valid gzip"
  h=$(gzip -dc "$T/lay/blobs/sha256/$b" | sha256sum | cut -d' ' -f1)
  grep -q "sha256:$h" "$T/lay/blobs/sha256/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["digest"][7:])' "$T/lay/blobs/sha256/${man#sha256:}")" ||
    fail "diff_id of layer $b is not the sha256 of its tar"
done
# whiteouts in the top layer's tar
top=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][1]["digest"][7:])' "$T/lay/blobs/sha256/${man#sha256:}")
tar -tzf "$T/lay/blobs/sha256/$top" >"$T/top.list"
grep -qx '.wh.gone' "$T/top.list" || fail "no whiteout for /gone: $(cat "$T/top.list")"
grep -qx 'usr/.wh.abs-link' "$T/top.list" || fail "no whiteout for /usr/abs-link"

# --- umoci unpack equals strata export ---
expect_ok "$STRATA" --store "$S" export demo:1 "$T/export"
expect_ok umoci unpack --image "$T/lay:1" "$T/bundle"
compare_rootfs "$T/export" "$T/bundle/rootfs"
[ ! -e "$T/bundle/rootfs/gone" ] || fail "deleted /gone came back"
[ "$(stat -c %a "$T/bundle/rootfs/usr/bin/tool")" = 4755 ] || fail "setuid bit lost"

# --- deterministic: another store, same recipe -> same manifest digest ---
expect_ok "$STRATA" --store "$T/store2" build r.yaml
expect_ok "$STRATA" --store "$T/store2" -j 1 publish demo:1 --oci "$T/lay2:again"
[ "$(tail -n 1 "$T/out")" = "$man" ] || fail "not deterministic: $(tail -n 1 "$T/out") != $man"
cmp "$T/lay/blobs/sha256/$top" "$T/lay2/blobs/sha256/$top" || fail "layer blobs differ"
# a republish into the same layout makes no layer
expect_ok "$STRATA" --store "$S" publish demo:1 --oci "$T/lay:1"
grep -q "2 layers (0 made, 2 already there)" "$T/err" || fail "republish: $(cat "$T/err")"
[ "$(tail -n 1 "$T/out")" = "$man" ] || fail "republish changed the digest"
# a missing blob is made again, with the same digest
rm "$T/lay/blobs/sha256/$top"
expect_ok "$STRATA" --store "$S" publish demo:1 --oci "$T/lay:1"
grep -q "(1 made, 1 already there)" "$T/err" || fail "remake: $(cat "$T/err")"
[ -f "$T/lay/blobs/sha256/$top" ] || fail "missing blob not written again"

# --- gzip blocks are compressed in parallel: a layer of several 1 MiB blocks
# gives the same bytes with 1, 2 or 3 threads (and inline with -j 0), valid
# gzip whose tar is the diff_id, read by GNU gzip, Python and umoci (Go) ---
mkdir -p "$W/bigroot/data"
text_file "$W/bigroot/data/text" 3500000
rand_file "$W/bigroot/data/random" 1500000
for i in $(seq 1 200); do printf 'file %d\n' "$i" >"$W/bigroot/data/f$i"; done
printf 'image: big\ntag: "1"\nlayers:\n  - name: base\n    sources:\n      - dir: ./bigroot\n' >big.yaml
expect_ok "$STRATA" --store "$S" build big.yaml
bman=
for j in 1 2 3 0; do
  rm -rf "$S/oci"
  expect_ok "$STRATA" --store "$S" -j $j publish big:1 --oci "$T/big$j:1"
  [ -z "$bman" ] || [ "$(tail -n 1 "$T/out")" = "$bman" ] || fail "-j $j gave another manifest"
  bman=$(tail -n 1 "$T/out")
done
bl=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["digest"][7:])' "$T/big1/blobs/sha256/${bman#sha256:}")
blob=$T/big1/blobs/sha256/$bl
cmp "$blob" "$T/big2/blobs/sha256/$bl" || fail "-j 1 and -j 2 blobs differ"
gzip -t "$blob" || fail "parallel gzip is not valid gzip"
[ "$(gzip -dc "$blob" | wc -c)" -gt $((4 << 20)) ] || fail "big layer tar is not over 4 blocks"
h=$(gzip -dc "$blob" | sha256sum | cut -d' ' -f1)
grep -q "sha256:$h" "$T/big1/blobs/sha256/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["digest"][7:])' "$T/big1/blobs/sha256/${bman#sha256:}")" ||
  fail "diff_id of the big layer is not the sha256 of its tar"
python3 -c 'import gzip, hashlib, sys; print(hashlib.sha256(gzip.open(sys.argv[1]).read()).hexdigest())' "$blob" >"$T/pyhash"
[ "$(cat "$T/pyhash")" = "$h" ] || fail "Python's gzip reads another tar"
# one gzip member (no name, mtime 0) per 1 MiB block of the tar, in order
python3 - "$blob" "$(gzip -dc "$blob" | wc -c)" <<'P' || fail "gzip framing"
import sys, zlib
data, size = open(sys.argv[1], "rb").read(), int(sys.argv[2])
members, total = 0, 0
while data:
    assert data[:8] == bytes([0x1f, 0x8b, 8, 0, 0, 0, 0, 0]), data[:10]
    d = zlib.decompressobj(31)
    n = len(d.decompress(data))
    assert d.eof
    assert n == min(1 << 20, size - total), (members, n)
    members, total, data = members + 1, total + n, d.unused_data
assert total == size and members == (size + (1 << 20) - 1) >> 20, (members, total)
P
expect_ok "$STRATA" --store "$S" export big:1 "$T/bigexport"
expect_ok umoci unpack --image "$T/big2:1" "$T/bigbundle"
compare_rootfs "$T/bigexport" "$T/bigbundle/rootfs"

# --- tags accumulate; --zstd ---
expect_ok "$STRATA" --store "$S" publish demo:1 --oci "$T/lay:z" --zstd
zman=$(tail -n 1 "$T/out")
[ "$zman" != "$man" ] || fail "--zstd gave the gzip manifest"
[ "$(manifest_digest_of_tag "$T/lay" 1)" = "$man" ] || fail "tag 1 lost when adding z"
[ "$(manifest_digest_of_tag "$T/lay" z)" = "$zman" ] || fail "tag z not in index.json"
grep -q 'tar+zstd' "$T/lay/blobs/sha256/${zman#sha256:}" || fail "zstd manifest has no tar+zstd layers"
expect_ok skopeo inspect "oci:$T/lay:z"
zl=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["digest"][7:])' "$T/lay/blobs/sha256/${zman#sha256:}")
zstd -t -q "$T/lay/blobs/sha256/$zl" || fail "zstd layer is not valid zstd"
expect_ok skopeo copy "oci:$T/lay:z" "dir:$T/zcopy"
ls "$T/lay/blobs/sha256" | grep -q '^\.' && fail "temp files left in blobs/sha256"

# --- bad input ---
expect_fail 2 'exactly one of --oci and --registry' "$STRATA" --store "$S" publish demo:1
expect_fail 2 'expected DIR' "$STRATA" --store "$S" publish demo:1 --oci "$T/x:bad tag"
expect_fail 1 'not found' "$STRATA" --store "$S" publish demo:nope --oci "$T/none"
[ ! -e "$T/none/index.json" ] || fail "an index.json for an unknown image"
mkdir -p "$T/badlay"
printf '{"schemaVersion": 2, "manifests": [' >"$T/badlay/index.json"
expect_fail 1 "badlay: index.json: invalid JSON" "$STRATA" --store "$S" publish demo:1 --oci "$T/badlay"
[ "$(cat "$T/badlay/index.json")" = '{"schemaVersion": 2, "manifests": [' ] || fail "bad index.json overwritten"
echo "ok"
