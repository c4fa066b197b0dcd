#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata publish --registry: push to a local docker-registry (started here on
# 127.0.0.1), read back with skopeo inspect and copy (the copy's rootfs
# equals strata export); pushing again uploads no layer byte; a new image
# sharing the base layer uploads only its own layer; the manifest digest is
# the one --oci gives; errors: no registry listening, a bad target.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root
oci_tools
start_registry

oci_build_demo
R=127.0.0.1:$REG_PORT

expect_ok "$STRATA" --store "$S" publish demo:1 --registry "$R/team/demo:1" --insecure
man=$(tail -n 1 "$T/out")
[[ $man =~ $DIGEST_RE ]] || fail "no digest: $man"
grep -q "uploaded 3 blobs" "$T/err" || fail "first push: $(cat "$T/err")"
expect_ok skopeo inspect --tls-verify=false "docker://$R/team/demo:1"
python3 - "$T/out" "$man" <<'P' || fail "skopeo inspect: $(cat "$T/out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["Digest"] == sys.argv[2], (j["Digest"], sys.argv[2])
assert len(j["Layers"]) == 2 and j["Labels"]["cuda"] == "12.4"
P
expect_ok skopeo copy --src-tls-verify=false "docker://$R/team/demo:1" "oci:$T/pulled:1"
expect_ok umoci unpack --image "$T/pulled:1" "$T/bundle"
expect_ok "$STRATA" --store "$S" export demo:1 "$T/export"
compare_rootfs "$T/export" "$T/bundle/rootfs"
expect_ok skopeo copy --src-tls-verify=false "docker://$R/team/demo:1" "dir:$T/copy"

# --- nothing missing: no layer byte goes up ---
expect_ok "$STRATA" --store "$S" publish demo:1 --registry "$R/team/demo:1" --insecure
grep -q "uploaded 0 blobs, 0 layer bytes uploaded" "$T/err" || fail "re-push: $(cat "$T/err")"
[ "$(tail -n 1 "$T/out")" = "$man" ] || fail "re-push gave another manifest"
# the same manifest as an OCI layout publish
expect_ok "$STRATA" --store "$S" publish demo:1 --oci "$T/lay:1"
[ "$(tail -n 1 "$T/out")" = "$man" ] || fail "--oci and --registry manifests differ"

# --- a second image sharing the base layer uploads only its top layer ---
sed -e 's/^tag: "1"/tag: "2"/' -e 's/changed/changed again/' r.yaml >r2.yaml
printf 'changed again\n' >up2.txt
sed -i 's|      - dir: ./up|      - dir: ./up\n      - file: ./up2.txt\n        dest: /etc/motd|' r2.yaml
expect_ok "$STRATA" --store "$S" build r2.yaml
expect_ok "$STRATA" --store "$S" publish demo:2 --registry "$R/team/demo:2" --insecure
grep -q "uploaded 2 blobs" "$T/err" || fail "shared base uploaded again: $(cat "$T/err")"
expect_ok skopeo inspect --tls-verify=false "docker://$R/team/demo:2"

# --- errors ---
expect_fail 2 'exactly one of' "$STRATA" --store "$S" publish demo:1
expect_fail 1 "registry target 'nohost': expected HOST" "$STRATA" --store "$S" publish demo:1 --registry nohost --insecure
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect_fail 1 "registry http://127.0.0.1:$dead: HEAD blob" "$STRATA" --store "$S" publish demo:1 --registry "127.0.0.1:$dead/x:1" --insecure
echo "ok"
