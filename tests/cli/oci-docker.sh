#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The oci: recipe source on tarballs. A docker archive written by skopeo
# (docker-archive:, the classic `docker save` shape) from a layout made by
# umoci imports to the same layer (same digest, same files) as the layout
# itself, with its config; so do the same archive gzip-compressed, with
# manifest.json naming the legacy <id>/layer.tar symlinks, in the newer
# docker save shape (an OCI layout plus manifest.json in the tar), and a
# plain OCI layout packed with tar. ref: picks an image of a multi-image
# archive by RepoTag. Bad archives (truncated, malformed manifest.json, a
# layer member missing, a layer whose content no longer matches its
# diff_id, a config not matching its name, a symlink member leaving the
# tarball, an unknown ref) fail with one line naming the tarball and the
# member, exit 1, and leave the store as it was.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root
oci_tools

W=$T/w
mkdir -p "$W"
cd "$W"
S=$T/store
cat >dk.py <<'P'
# dk.py CMD ...: rewrites of docker archives (member order kept)
#   rewrite SRC DST [NAME=FILE|NAME=-]...  replace a member's content (FILE) or drop it (-)
#   symlink SRC DST NAME TARGET           add a symlink member
#   legacy SRC DST                        manifest.json names the <id>/layer.tar symlinks
#   merge A B DST                         one archive with the images of A and B
#   flip SRC MEMBER                       invert a byte of the first file inside layer MEMBER
#   docker25 LAYOUT REF DST               the layout plus manifest.json (newer docker save)
#   longnames SRC DST pax|gnu              layers moved under a 270-byte directory name
import io, json, os, sys, tarfile
def members(path):
    with tarfile.open(path) as t:
        return [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
def write(dst, ms, fmt=tarfile.USTAR_FORMAT):
    with tarfile.open(dst, "w", format=fmt) as t:
        for m, data in ms:
            if data is not None:
                m.size = len(data)
            t.addfile(m, io.BytesIO(data) if data is not None else None)
def put(ms, name, data):
    ms = [(m, d) for m, d in ms if m.name != name]
    ti = tarfile.TarInfo(name); ti.size = len(data); ti.mode = 0o444
    return ms + [(ti, data)]
cmd, a = sys.argv[1], sys.argv[2:]
if cmd == "rewrite":
    ms = members(a[0])
    for r in a[2:]:
        name, f = r.split("=", 1)
        ms = [(m, d) for m, d in ms if m.name != name] if f == "-" else put(ms, name, open(f, "rb").read())
    write(a[1], ms)
elif cmd == "symlink":
    ti = tarfile.TarInfo(a[2]); ti.type = tarfile.SYMTYPE; ti.linkname = a[3]
    write(a[1], members(a[0]) + [(ti, None)])
elif cmd == "legacy":
    ms = members(a[0])
    links = {os.path.basename(m.linkname): m.name for m, _ in ms if m.issym()}
    man = json.loads(dict((m.name, d) for m, d in ms)["manifest.json"])
    for img in man:
        img["Layers"] = [links[l] for l in img["Layers"]]
    write(a[1], put(ms, "manifest.json", json.dumps(man).encode()))
elif cmd == "merge":
    ma, mb = members(a[0]), members(a[1])
    names = {m.name for m, _ in ma}
    man = json.loads(dict((m.name, d) for m, d in ma)["manifest.json"]) + \
          json.loads(dict((m.name, d) for m, d in mb)["manifest.json"])
    ms = [x for x in ma if x[0].name != "repositories"] + \
         [x for x in mb if x[0].name not in names and x[0].name != "repositories"]
    write(a[2], put(ms, "manifest.json", json.dumps(man).encode()))
elif cmd == "flip":
    with tarfile.open(a[0]) as t:
        outer = t.getmember(a[1]).offset_data
        inner = tarfile.open(fileobj=io.BytesIO(t.extractfile(a[1]).read()))
        f = next(m for m in inner.getmembers() if m.isfile() and m.size > 0)
    with open(a[0], "r+b") as fh:
        fh.seek(outer + f.offset_data); b = fh.read(1)
        fh.seek(outer + f.offset_data); fh.write(bytes([b[0] ^ 0xff]))
elif cmd == "longnames":
    ms, d = members(a[0]), "d" * 150 + "/" + "e" * 120 + "/"
    man = json.loads(dict((m.name, d) for m, d in ms)["manifest.json"])
    for m, _ in ms:
        if m.name in man[0]["Layers"]:
            m.name = d + m.name
    man[0]["Layers"] = [d + l for l in man[0]["Layers"]]
    write(a[1], put(ms, "manifest.json", json.dumps(man).encode()),
          {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT}[a[2]])
elif cmd == "docker25":
    lay, ref, dst = a
    idx = json.load(open(lay + "/index.json"))
    d = next(m for m in idx["manifests"]
             if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == ref)
    man = json.load(open(lay + "/blobs/sha256/" + d["digest"][7:]))
    blob = lambda desc: "blobs/sha256/" + desc["digest"][7:]
    dm = [{"Config": blob(man["config"]), "RepoTags": ["acme/base:" + ref],
           "Layers": [blob(l) for l in man["layers"]]}]
    with tarfile.open(dst, "w") as t:
        for f in ["oci-layout", "index.json"] + [blob(d), blob(man["config"])] + \
                 [blob(l) for l in man["layers"]]:
            t.add(lay + "/" + f, f)
        ti = tarfile.TarInfo("manifest.json"); data = json.dumps(dm).encode(); ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
P
recipe() { # NAME SRC [REF]: NAME.yaml builds image NAME:1, one layer 'base' from oci: SRC
  { printf 'image: %s\ntag: "1"\nlayers:\n  - name: base\n    sources:\n      - oci: %s\n' "$1" "$2"
    [ -z "${3:-}" ] || printf '        ref: "%s"\n' "$3"; } >"$1.yaml"
}
layer_of() { # IMAGE: the digest of its layer 'base'
  expect_ok "$STRATA" --store "$S" inspect "$1"
  awk '$1 == "base" {print $2}' "$T/out"
}
imports_same() { # NAME SRC [REF]: builds it; same layer and files as the layout's
  recipe "$@"
  expect_ok "$STRATA" --store "$S" build "$1.yaml"
  [ "$(layer_of "$1:1")" = "$want_layer" ] || fail "$2 ${3:-}: layer differs from the layout's"
  rm -rf "$T/got"
  expect_ok "$STRATA" --store "$S" export "$1:1" "$T/got"
  compare_rootfs "$T/want/rootfs" "$T/got"
}

# --- the layout itself, and a second image with another config ---
umoci_base base "$T/want"
expect_ok umoci config --image base:v1 --tag v2 --config.env FOO=two
recipe layout ./base v1
expect_ok "$STRATA" --store "$S" build layout.yaml
want_layer=$(layer_of layout:1)
expect_ok "$STRATA" --store "$S" export layout:1 "$T/got-layout"
compare_rootfs "$T/want/rootfs" "$T/got-layout"

# --- docker-archive written by skopeo: same layer, config carried over ---
expect_ok skopeo copy oci:base:v1 docker-archive:docker.tar:acme/base:v1
imports_same dock ./docker.tar
expect_ok "$STRATA" --store "$S" inspect dock:1
for want in 'FOO=base' 'KEEP=1' 'tier=base' 'vendor=acme' 'workdir   /home/user' \
  'entrypoint /bin/sh -c true'; do
  grep -qF "$want" "$T/out" || fail "config lacks '$want': $(cat "$T/out")"
done
expect_ok "$STRATA" --store "$S" build dock.yaml
grep -q 'cached' "$T/out" || fail "unchanged docker archive rebuilt: $(cat "$T/out")"
imports_same byref ./docker.tar acme/base:v1
imports_same byfull ./docker.tar docker.io/acme/base:v1
gzip -c docker.tar >docker.tar.gz
imports_same gz ./docker.tar.gz
expect_ok python3 dk.py legacy docker.tar legacy.tar
tar tvf legacy.tar | grep -q 'layer.tar -> ' || fail "skopeo wrote no <id>/layer.tar symlinks"
imports_same legacy ./legacy.tar
# members with long names (pax and GNU extended headers before theirs)
for fmt in pax gnu; do
  expect_ok python3 dk.py longnames docker.tar "long-$fmt.tar" $fmt
  imports_same "long$fmt" "./long-$fmt.tar"
done
# the newer docker save shape, and a plain OCI layout packed with tar
expect_ok python3 dk.py docker25 base v1 docker25.tar
imports_same d25 ./docker25.tar acme/base:v1
tar -C base -cf oci.tar .
imports_same ocitar ./oci.tar v1

# --- several images: ref picks one by RepoTag ---
expect_ok skopeo copy oci:base:v2 docker-archive:two.tar:acme/base:v2
expect_ok python3 dk.py merge docker.tar two.tar multi.tar
imports_same multi ./multi.tar acme/base:v2
expect_ok "$STRATA" --store "$S" inspect multi:1
grep -qF 'FOO=two' "$T/out" || fail "ref did not pick acme/base:v2: $(cat "$T/out")"
expect_ok "$STRATA" --store "$S" images
images_before=$(cat "$T/out")
unchanged() {
  expect_ok "$STRATA" --store "$S" images
  [ "$(cat "$T/out")" = "$images_before" ] || fail "the store's images changed: $(cat "$T/out")"
  expect_ok "$STRATA" --store "$S" store fsck
}
expect_bad() { # TARBALL PATTERN [REF]
  recipe bad "./$1" "${3:-}"
  expect_fail 1 "$2" "$STRATA" --store "$S" build bad.yaml
  unchanged
}
expect_bad multi.tar "docker archive $W/multi.tar: 2 images, say which with ref: \(docker.io/acme/base:v1, docker.io/acme/base:v2\)"
expect_bad multi.tar "docker archive $W/multi.tar: no image tagged acme/base:v3 \(it has: docker.io/acme/base:v1, docker.io/acme/base:v2\)" acme/base:v3

# --- bad archives ---
layer0=$(python3 -c 'import json,sys,tarfile; print(json.load(tarfile.open(sys.argv[1]).extractfile("manifest.json"))[0]["Layers"][0])' docker.tar)
config=$(python3 -c 'import json,sys,tarfile; print(json.load(tarfile.open(sys.argv[1]).extractfile("manifest.json"))[0]["Config"])' docker.tar)
diff0=$(tar xOf docker.tar "$config" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rootfs"]["diff_ids"][0])')
head -c $(($(stat -c %s docker.tar) / 2)) docker.tar >trunc.tar
expect_bad trunc.tar "tarball $W/trunc.tar: after member '$layer0': .*(Truncated|truncated|premature|end of)"
printf '[{"Config": "%s", "Layers": ' "$config" >bad.json
expect_ok python3 dk.py rewrite docker.tar badjson.tar manifest.json=bad.json
expect_bad badjson.tar "docker archive $W/badjson.tar: manifest.json: invalid JSON"
printf '[{"Config": "%s", "Layers": 5}]' "$config" >bad.json
expect_ok python3 dk.py rewrite docker.tar badman.tar manifest.json=bad.json
expect_bad badman.tar "docker archive $W/badman.tar: manifest.json: \[0\]: \"Layers\" is not an array"
expect_ok python3 dk.py rewrite docker.tar nolayer.tar "$layer0=-"
expect_bad nolayer.tar "docker archive $W/nolayer.tar: layer 0 member $layer0 is missing"
cp docker.tar altered.tar
expect_ok python3 dk.py flip altered.tar "$layer0"
expect_bad altered.tar "oci $W/altered.tar: layer 0 member $layer0: uncompressed tar sha256:[0-9a-f]{64} does not match its diff_id $diff0"
tar xOf docker.tar "$config" | sed 's/FOO=base/FOO=evil/' >cfg.json
expect_ok python3 dk.py rewrite docker.tar badcfg.tar "$config=cfg.json"
expect_bad badcfg.tar "docker archive $W/badcfg.tar: config $config: content does not match the digest it is named by"
expect_ok python3 dk.py symlink docker.tar escape.tar x/layer.tar ../../etc/passwd
expect_bad escape.tar "tarball $W/escape.tar: member 'x/layer.tar': symlink target '../../etc/passwd': '..' leaves the tarball"
# the altered archive's gzip form fails the same way
gzip -c altered.tar >altered.tar.gz
expect_bad altered.tar.gz "layer 0 member $layer0: uncompressed tar sha256:[0-9a-f]{64} does not match its diff_id $diff0"
echo "ok"
