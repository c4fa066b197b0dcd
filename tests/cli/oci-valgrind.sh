#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The OCI commands run clean under valgrind memcheck (no invalid access, no
# uninitialised memory, no definite leak): publish to a layout and to a
# registry (first push and re-push), authenticated pushes (token server,
# Basic over HTTPS) and their refusals, a build from an oci: source (a
# layout, a docker archive written by skopeo, plain and gzip'd), and the
# error paths of a bad layout, bad docker archives (truncated, a layer not
# matching its diff_id, an unknown ref) and an unreachable registry.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root
command -v valgrind >/dev/null || skip "valgrind is not installed"
[ -z "${STRATA_SANITIZED:-}" ] || skip "sanitizer build"
command -v skopeo >/dev/null || skip "skopeo not installed"
start_registry


W=$T/w
mkdir -p "$W/root/etc" "$W/root/bin"
cd "$W"
printf 'x\n' >root/etc/x
ln -s ../etc/x root/bin/l
printf 'image: v\ntag: "1"\nlayers:\n  - name: base\n    sources:\n      - dir: ./root\n    delete: [/gone]\n' >r.yaml
S=$T/store
expect_ok "$STRATA" --store "$S" build r.yaml
vg 0 --store "$S" -j 2 publish v:1 --oci "$T/lay:1"
vg 0 --store "$S" publish v:1 --oci "$T/lay:z" --zstd
vg 0 --store "$S" publish v:1 --registry "127.0.0.1:$REG_PORT/v:1" --insecure
vg 0 --store "$S" publish v:1 --registry "127.0.0.1:$REG_PORT/v:1" --insecure
printf 'image: w\ntag: "1"\nlayers:\n  - name: base\n    sources:\n      - oci: %s\n        ref: "1"\nconfig:\n  env: {A: b}\n' "$T/lay" >o.yaml
vg 0 --store "$S" build o.yaml
expect_ok skopeo copy "oci:$T/lay:1" "docker-archive:$T/d.tar:v/w:1"
gzip -c "$T/d.tar" >"$T/d.tar.gz"
head -c 3000 "$T/d.tar" >"$T/trunc.tar"
cp "$T/d.tar" "$T/flip.tar"
python3 - "$T/flip.tar" <<'P'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t: # the byte of etc/x's content in the layer member
    m = next(m for m in t.getmembers() if m.isfile() and m.name.endswith(".tar"))
    pos = m.offset_data + t.extractfile(m).read().index(b"x\n")
with open(sys.argv[1], "r+b") as f:
    f.seek(pos); f.write(b"y")
P
for d in d.tar d.tar.gz trunc.tar flip.tar; do
  printf 'image: d\ntag: "1"\nlayers:\n  - name: base\n    sources:\n      - oci: %s\n' "$T/$d" >"$d.yaml"
done
for y in d.tar.yaml d.tar.gz.yaml; do
  vg 0 --store "$S" build "$y"
  grep -q 'built' "$T/out" || fail "$y: nothing imported: $(cat "$T/out")"
done
vg 1 --store "$S" build trunc.tar.yaml
vg 1 --store "$S" build flip.tar.yaml
grep -q 'diff_id' "$T/err" || fail "flip.tar: $(cat "$T/err")"
printf '        ref: v/w:2\n' >>d.tar.yaml
vg 1 --store "$S" build d.tar.yaml
printf '{' >"$T/lay/index.json"
vg 1 --store "$S" build o.yaml
vg 1 --store "$S" publish v:1 --oci "$T/lay:1"
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
vg 1 --store "$S" publish v:1 --registry "127.0.0.1:$dead/v:1" --insecure
# authenticated pushes: a bearer token from a token server, Basic auth over HTTPS
# (--tls-ca), and refusals of both
start_token_registry
vg 0 --store "$S" publish v:1 --registry "127.0.0.1:$TREG_PORT/v:1" --insecure --username alice \
  --password-stdin <<<"$TOK_PASS"
vg 1 --store "$S" publish v:1 --registry "127.0.0.1:$TREG_PORT/v:1" --insecure --username bob \
  --password-stdin <<<"bob-pass"
start_htpasswd_registry
vg 0 --store "$S" publish v:1 --registry "127.0.0.1:$HT_PORT/v:1" --tls-ca "$T/ht-tls.crt" \
  --username alice --password-stdin <<<"$HT_PASS"
vg 1 --store "$S" publish v:1 --registry "127.0.0.1:$HT_PORT/v:1" --tls-ca "$T/ht-tls.crt" \
  --username alice --password-stdin <<<"wrong"
echo ok
