#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata serve over TLS and mTLS (certificates made here with openssl): a
# pull with the right CA works; plain text against TLS, an unknown CA and a
# missing client certificate fail with one clear line; a bad certificate
# file is named. Then graceful shutdown: SIGTERM in the middle of a pull
# stops the server within its grace period, and the client's store is
# consistent either way.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote-lib.sh"
command -v openssl >/dev/null || skip "openssl is not installed"

C=$T/certs
mkdir -p "$C"
ec() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "$@" 2>/dev/null; }
ec -x509 -keyout "$C/ca.key" -out "$C/ca.pem" -days 2 -subj /CN=strata-test-ca
ec -x509 -keyout "$C/other.key" -out "$C/other.pem" -days 2 -subj /CN=other-ca
ec -keyout "$C/srv.key" -out "$C/srv.csr" -subj /CN=localhost
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$C/srv.ext"
openssl x509 -req -in "$C/srv.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial \
  -out "$C/srv.pem" -days 2 -extfile "$C/srv.ext" 2>/dev/null
ec -keyout "$C/cli.key" -out "$C/cli.csr" -subj /CN=node-1
printf 'extendedKeyUsage=clientAuth\n' >"$C/cli.ext"
openssl x509 -req -in "$C/cli.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial \
  -out "$C/cli.pem" -days 2 -extfile "$C/cli.ext" 2>/dev/null
[ -s "$C/cli.pem" ] && [ -s "$C/srv.pem" ] || fail "openssl could not make the test certificates"

A=$T/a
make_image "$A" "$T/img" demo:v1 2
# server-side file errors
expect_fail 1 "TLS file $T/none.pem" "$STRATA" --store "$T/s0" serve --listen 127.0.0.1:0 \
  --tls-cert "$T/none.pem" --tls-key "$C/srv.key"
expect_fail 1 "needs both --tls-cert and --tls-key" "$STRATA" --store "$T/s0" serve \
  --listen 127.0.0.1:0 --tls-cert "$C/srv.pem"
expect_fail 1 "tokens file $T/none" "$STRATA" --store "$T/s0" serve --listen 127.0.0.1:0 \
  --tokens "$T/none"
expect_fail 2 "unknown option" "$STRATA" --store "$T/s0" serve --bogus

# TLS
serve_start tls "$T/srv" --tls-cert "$C/srv.pem" --tls-key "$C/srv.key"
grep -q 'TLS' "$T/tls.log" || fail "server does not say it uses TLS"
expect_ok "$STRATA" --store "$A" push demo:v1 --server "$tls_ADDR" --tls-ca "$C/ca.pem"
expect_ok "$STRATA" --store "$T/b" pull demo:v1 --server "$tls_ADDR" --tls-ca "$C/ca.pem"
expect_ok "$STRATA" --store "$T/b" store fsck
expect_fail 1 "unavailable.*TLS" "$STRATA" --store "$T/c" pull demo:v1 --server "$tls_ADDR" --deadline 10
cat "$T/err"
expect_fail 1 "unavailable" "$STRATA" --store "$T/c" pull demo:v1 --server "$tls_ADDR" \
  --tls-ca "$C/other.pem" --deadline 10
expect_fail 1 "TLS file $T/none.pem" "$STRATA" --store "$T/c" pull demo:v1 --server "$tls_ADDR" \
  --tls-ca "$T/none.pem"
serve_stop tls
# a plain server and a TLS client
serve_start plain "$T/srv"
expect_fail 1 "unavailable.*TLS" "$STRATA" --store "$T/c" pull demo:v1 --server "$plain_ADDR" \
  --tls-ca "$C/ca.pem" --deadline 10
serve_stop plain

# mTLS
serve_start mtls "$T/srv" --tls-cert "$C/srv.pem" --tls-key "$C/srv.key" --tls-client-ca "$C/ca.pem"
expect_fail 1 "unavailable" "$STRATA" --store "$T/c" pull demo:v1 --server "$mtls_ADDR" \
  --tls-ca "$C/ca.pem" --deadline 10
expect_ok "$STRATA" --store "$T/c" pull demo:v1 --server "$mtls_ADDR" --tls-ca "$C/ca.pem" \
  --tls-cert "$C/cli.pem" --tls-key "$C/cli.key"
expect_ok "$STRATA" --store "$T/c" store fsck
serve_stop mtls

# graceful shutdown in the middle of a pull
make_image "$A" "$T/big" demo:big 64
serve_start g "$T/srv" --grace 1
expect_ok "$STRATA" --store "$A" push demo:big --server "$g_ADDR"
"$STRATA" --store "$T/d" pull demo:big --server "$g_ADDR" --streams 1 >"$T/d.out" 2>"$T/d.err" &
pullpid=$!
wait_until 60 grep -q 'method=/strata.v1.Cas/GetBlob status=0 in=[0-9]* out=[0-9]\{4,\}' "$T/g.log" ||
  fail "the pull did not get to the chunks"
start=$SECONDS
serve_stop g
[ $((SECONDS - start)) -lt 20 ] || fail "shutdown took $((SECONDS - start)) s with a 1 s grace"
prc=0
wait "$pullpid" || prc=$?
if [ "$prc" -ne 0 ]; then
  [ "$(grep -c '^strata: error: ' "$T/d.err")" -eq 1 ] || fail "pull cut by shutdown: $(cat "$T/d.err")"
  expect_fail 1 "image demo:big not found" "$STRATA" --store "$T/d" inspect demo:big
fi
expect_ok "$STRATA" --store "$T/d" store fsck
expect_ok "$STRATA" --store "$T/srv" store fsck
cat "$T/d.err"; echo PASS
