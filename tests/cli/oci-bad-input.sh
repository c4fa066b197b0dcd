#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Hostile OCI layouts as oci: recipe sources: a malformed index.json or
# manifest, a blob whose digest or size does not match its descriptor, a
# config whose diff_id is not the layer's uncompressed tar's SHA-256, '..'
# and absolute names, a write through a symlink (in the same layer and in
# the next), a truncated gzip stream, an unknown ref: each fails with one
# line naming the layout, the layer's blob and the entry, exit 1, and
# leaves no tag and a store that passes fsck.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root

W=$T/w
mkdir -p "$W"
cd "$W"
cat >mk.py <<'P'
# mk.py DIR SPEC: an OCI layout whose layers are built from SPEC (python literal):
# a list of layers, each {"comp": "gzip"|"none", "entries": [(name, type, data/target)],
# "truncate": N (cut the blob to N bytes), "flip": N (invert byte N after hashing),
# "bad_diff": True (the config's diff_id is not the tar's; digests of blobs, config,
# manifest all consistent)}
import gzip, hashlib, io, json, os, sys, tarfile
d, spec = sys.argv[1], eval(sys.argv[2])
os.makedirs(d + "/blobs/sha256", exist_ok=True)
def blob(data, flip=None):
    h = hashlib.sha256(data).hexdigest()
    if flip is not None:
        data = bytearray(data); data[flip] ^= 0xff; data = bytes(data)
    open(f"{d}/blobs/sha256/{h}", "wb").write(data)
    return h
layers, diffs = [], []
for l in spec:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, typ, val in l["entries"]:
            ti = tarfile.TarInfo(name)
            if typ == "file":
                ti.size = len(val); t.addfile(ti, io.BytesIO(val))
            elif typ == "dir":
                ti.type = tarfile.DIRTYPE; ti.mode = 0o755; t.addfile(ti)
            elif typ == "sym":
                ti.type = tarfile.SYMTYPE; ti.linkname = val; t.addfile(ti)
    tar = buf.getvalue()
    diffs.append("sha256:" + hashlib.sha256(tar + b"x" * l.get("bad_diff", 0)).hexdigest())
    data = gzip.compress(tar, mtime=0) if l.get("comp", "gzip") == "gzip" else tar
    if "truncate" in l:
        data = data[: l["truncate"]]
    h = blob(data, l.get("flip"))
    mt = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if l.get("comp", "gzip") == "gzip" else "")
    layers.append({"mediaType": mt, "digest": "sha256:" + h, "size": len(data)})
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                  "rootfs": {"type": "layers", "diff_ids": diffs}}).encode()
ch = blob(cfg)
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                             "digest": "sha256:" + ch, "size": len(cfg)},
                  "layers": layers}).encode()
mh = blob(man)
open(d + "/oci-layout", "w").write('{"imageLayoutVersion": "1.0.0"}')
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
           "digest": "sha256:" + mh, "size": len(man),
           "annotations": {"org.opencontainers.image.ref.name": "t"}}]}, open(d + "/index.json", "w"))
print(" ".join(l["digest"][7:] for l in layers))
P
S=$T/store
bad_recipe() { # DIR
  printf 'image: bad\ntag: "1"\nlayers:\n  - name: base\n    sources:\n      - oci: %s\n' "$1" >"$1.yaml"
}
nothing_imported() {
  expect_ok "$STRATA" --store "$S" images
  ! grep -q '^bad' "$T/out" || fail "a bad image was tagged: $(cat "$T/out")"
  expect_ok "$STRATA" --store "$S" store fsck
}
expect_bad() { # DIR PATTERN
  bad_recipe "$1"
  expect_fail 1 "$2" "$STRATA" --store "$S" build "$1.yaml"
  nothing_imported
}
ok_entries='[("etc/", "dir", None), ("etc/f", "file", b"data\n")]'
# the crafted layout is accepted as it is
python3 mk.py good "[{'entries': $ok_entries}]" >/dev/null
bad_recipe good
expect_ok "$STRATA" --store "$S" build good.yaml
expect_ok "$STRATA" --store "$S" rmi bad:1
# malformed index.json
python3 mk.py badindex "[{'entries': $ok_entries}]" >/dev/null
printf '{"schemaVersion": 2, "manifests": [{"mediaType": ' >badindex/index.json
expect_bad badindex 'OCI layout .*badindex: index.json: invalid JSON'
python3 mk.py badindex2 "[{'entries': $ok_entries}]" >/dev/null
printf '{"schemaVersion": 2, "manifests": [{"mediaType": "x", "digest": "md5:00", "size": 1}]}' >badindex2/index.json
expect_bad badindex2 'badindex2: index.json: manifests\[0\]: unsupported digest'
# malformed manifest: index.json names a blob that is not a manifest
python3 mk.py badman "[{'entries': $ok_entries}]" >/dev/null
python3 - badman <<'P'
import hashlib, json, sys
d = sys.argv[1]; man = b'{"schemaVersion": 2, "config": {"digest": 5}, "layers": []}'
h = hashlib.sha256(man).hexdigest(); open(f"{d}/blobs/sha256/{h}", "wb").write(man)
idx = json.load(open(d + "/index.json")); idx["manifests"][0].update(digest="sha256:" + h, size=len(man))
json.dump(idx, open(d + "/index.json", "w"))
P
expect_bad badman "badman: manifest sha256:[0-9a-f]{64}: config: missing \"mediaType\""
# a blob whose content does not match its digest (an uncompressed layer, so
# the tar itself stays readable)
l=$(python3 mk.py flipped "[{'comp': 'none', 'entries': $ok_entries, 'flip': 1100}]")
expect_bad flipped "flipped: layer 0 blob sha256:$l: content does not match its digest"
# '..' and absolute names
l=$(python3 mk.py dotdot "[{'entries': [('../evil', 'file', b'x')]}]")
expect_bad dotdot "dotdot: layer 0 blob sha256:$l: entry '../evil': '..' component refused"
l=$(python3 mk.py absolute "[{'entries': [('/etc/evil', 'file', b'x')]}]")
expect_bad absolute "absolute: layer 0 blob sha256:$l: entry '/etc/evil': absolute name refused"
# a symlink out of the root, and a write through it, in the next layer and in the same one
l=$(python3 mk.py escape "[{'entries': [('link', 'sym', '../../../../tmp')]}, {'entries': [('link/evil', 'file', b'x')]}]")
l=${l#* }
expect_bad escape "escape: layer 1 blob sha256:$l: entry 'link/evil': 'link' is a symlink in a lower layer"
l=$(python3 mk.py escape1 "[{'entries': [('link', 'sym', '/'), ('link/evil', 'file', b'x')]}]")
expect_bad escape1 "escape1: layer 0 blob sha256:$l: .*parent of 'link/evil' is not a directory"
[ ! -e /tmp/evil ] && [ ! -e /evil ] || fail "a file was written through the symlink"
# truncated gzip (the descriptor matches the truncated blob)
l=$(python3 mk.py trunc "[{'entries': [('big', 'file', bytes(range(256)) * 4000)], 'truncate': 600}]")
expect_bad trunc "trunc: layer 0 blob sha256:$l: .*(truncated|Truncated|premature|end of)"
# the config's diff_id is not the SHA-256 of the uncompressed tar (every blob, the
# config, the manifest and index.json are consistent): gzip and plain layers
l=$(python3 mk.py baddiff "[{'entries': $ok_entries}, {'entries': [('etc/g', 'file', b'g')], 'bad_diff': 1}]")
l=${l#* }
expect_bad baddiff "baddiff: layer 1 blob sha256:$l: uncompressed tar sha256:[0-9a-f]{64} does not match its diff_id sha256:[0-9a-f]{64}"
l=$(python3 mk.py baddiff0 "[{'comp': 'none', 'entries': $ok_entries, 'bad_diff': 1}]")
expect_bad baddiff0 "baddiff0: layer 0 blob sha256:$l: uncompressed tar sha256:[0-9a-f]{64} does not match its diff_id"
# a blob shorter than its descriptor says
l=$(python3 mk.py short "[{'entries': $ok_entries}]")
truncate -s 10 "short/blobs/sha256/$l"
expect_bad short "short: layer 0 blob sha256:$l: size 10, its descriptor says"
# an unknown ref
python3 mk.py noref "[{'entries': $ok_entries}]" >/dev/null
printf 'image: bad\ntag: "1"\nlayers:\n  - name: base\n    sources:\n      - oci: noref\n        ref: nope\n' >noref.yaml
expect_fail 1 'noref: no manifest named nope \(it has: t\)' "$STRATA" --store "$S" build noref.yaml
nothing_imported
# ref only applies to oci sources
printf 'image: bad\nlayers:\n  - name: base\n    sources:\n      - dir: .\n        ref: x\n' >refdir.yaml
expect_fail 2 "'ref' only applies to oci sources" "$STRATA" --store "$S" build refdir.yaml
echo "ok"
