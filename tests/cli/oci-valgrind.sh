#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The OCI commands run clean under valgrind memcheck (no invalid access, no
# uninitialised memory, no definite leak): publish to a layout and to a
# registry (first push and re-push), authenticated pushes (token server,
# Basic over HTTPS) and their refusals, a build from an oci: source, and the
# error paths of a bad layout and an unreachable registry.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root
command -v valgrind >/dev/null || skip "valgrind is not installed"
[ -z "${STRATA_SANITIZED:-}" ] || skip "sanitizer build"
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
