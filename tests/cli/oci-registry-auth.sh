#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata publish --registry against registries that want credentials, all
# started here on 127.0.0.1: a docker-registry with htpasswd (Basic) auth over
# HTTPS with a self-signed certificate (--tls-ca), and a docker-registry with
# token auth next to a token server that signs RS256 JWTs (the distribution
# token protocol). Pushes are read back with skopeo --creds. Refusals (no
# credentials, a wrong password, a user without push, a bad --token, an
# untrusted certificate) fail with one line naming the registry or token
# server and the HTTP status.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root
oci_tools
command -v openssl >/dev/null || skip "openssl not installed"
start_htpasswd_registry
start_token_registry

oci_build_demo
expect_ok "$STRATA" --store "$S" publish demo:1 --oci "$T/lay:1"
man=$(tail -n 1 "$T/out")
[[ $man =~ $DIGEST_RE ]] || fail "no digest: $man"

# skopeo_digest REF CREDS: the manifest digest skopeo inspect gives
skopeo_digest() {
  expect_ok skopeo inspect --tls-verify=false --creds "$2" "docker://$1"
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["Digest"])' "$T/out"
}

# ---- (a) Basic auth (htpasswd) over HTTPS ----
H=127.0.0.1:$HT_PORT
pub_ht() { "$STRATA" --store "$S" publish demo:1 --registry "$H/team/demo:1" "$@"; }
expect_fail 1 "registry https://$H: HEAD blob sha256:[0-9a-f]+: .*(certificate|SSL)" pub_ht
expect_fail 1 "registry https://$H: HEAD blob sha256:[0-9a-f]+: HTTP 401 \(the registry wants a user name and password" \
  pub_ht --tls-ca "$T/ht-tls.crt"
expect_fail 1 "registry https://$H: HEAD blob sha256:[0-9a-f]+: HTTP 401 \(user 'alice': wrong user name or password\)" \
  env STRATA_REGISTRY_PASSWORD=wrong "$STRATA" --store "$S" publish demo:1 --registry "$H/team/demo:1" \
  --tls-ca "$T/ht-tls.crt" --username alice
expect_fail 2 "--password PASS is not accepted" pub_ht --tls-ca "$T/ht-tls.crt" --username alice --password x
expect_fail 2 "--password-stdin needs --username" pub_ht --tls-ca "$T/ht-tls.crt" --password-stdin </dev/null
[ ! -e "$T/ht-registry/docker/registry/v2/repositories/team/demo/_manifests" ] ||
  fail "a refused push left a manifest"

run pub_ht --tls-ca "$T/ht-tls.crt" --username alice --password-stdin <<<"$HT_PASS"
[ "$rc" -eq 0 ] || fail "push with basic auth: $(cat "$T/err")"
[ "$(tail -n 1 "$T/out")" = "$man" ] || fail "basic push gave another manifest"
grep -q "uploaded 3 blobs" "$T/err" || fail "basic push: $(cat "$T/err")"
[ "$(skopeo_digest "$H/team/demo:1" "alice:$HT_PASS")" = "$man" ] || fail "skopeo sees another digest"
run skopeo inspect --tls-verify=false --creds "alice:nope" "docker://$H/team/demo:1"
[ "$rc" -ne 0 ] && grep -q "unauthorized" "$T/err" || fail "skopeo with a wrong password: $(cat "$T/err")"
# the user from the environment, nothing missing any more
run env STRATA_REGISTRY_USER=alice STRATA_REGISTRY_PASSWORD="$HT_PASS" \
  "$STRATA" --store "$S" publish demo:1 --registry "$H/team/demo:1" --tls-ca "$T/ht-tls.crt"
[ "$rc" -eq 0 ] || fail "push with the user from the environment: $(cat "$T/err")"
grep -q "uploaded 0 blobs, 0 layer bytes uploaded" "$T/err" || fail "re-push: $(cat "$T/err")"

# ---- (b) Bearer tokens from a token server ----
R=127.0.0.1:$TREG_PORT
TS="token server http://127.0.0.1:$TOK_PORT/token"
pub_tok() { "$STRATA" --store "$S" publish demo:1 --registry "$R/team/demo:1" --insecure "$@"; }
expect_fail 1 "registry http://$R: $TS: HTTP 401 \(credentials needed\)" pub_tok
run pub_tok --username alice --password-stdin <<<"wrong"
[ "$rc" -eq 1 ] || fail "wrong password: exit $rc"
grep -Eq "^strata: error: registry http://$R: $TS: HTTP 401 \(wrong user name or password\)$" "$T/err" ||
  fail "wrong password: $(cat "$T/err")"
# bob may pull but not push: his token is refused at the first upload (the
# registry names the actions of the challenged scope in either order)
run pub_tok --username bob --password-stdin <<<"bob-pass"
[ "$rc" -eq 1 ] || fail "push without push access: exit $rc"
grep -Eq "^strata: error: registry http://$R: start upload of blob sha256:[0-9a-f]+: HTTP 401 \(the token for repository:team/demo:(pull,push|push,pull) was refused: insufficient_scope\)$" "$T/err" ||
  fail "push without push access: $(cat "$T/err")"
[ ! -e "$T/token-registry/docker/registry/v2/repositories/team/demo/_manifests" ] ||
  fail "a refused push left a manifest"

: >"$T/token.log"
run pub_tok --username alice --password-stdin <<<"$TOK_PASS"
[ "$rc" -eq 0 ] || fail "push with a token: $(cat "$T/err")"
[ "$(tail -n 1 "$T/out")" = "$man" ] || fail "token push gave another manifest"
grep -q "uploaded 3 blobs" "$T/err" || fail "token push: $(cat "$T/err")"
# one token for the whole push (HEADs, uploads, manifest), asked for pull and push
[ "$(cat "$T/token.log")" = "alice repository:team/demo:pull,push" ] ||
  fail "token requests: $(cat "$T/token.log")"
[ "$(skopeo_digest "$R/team/demo:1" "alice:$TOK_PASS")" = "$man" ] || fail "skopeo sees another digest"
expect_ok skopeo copy --src-tls-verify=false --src-creds "alice:$TOK_PASS" "docker://$R/team/demo:1" \
  "oci:$T/pulled:1"
expect_ok umoci unpack --image "$T/pulled:1" "$T/bundle"
expect_ok "$STRATA" --store "$S" export demo:1 "$T/export"
compare_rootfs "$T/export" "$T/bundle/rootfs"

# a token obtained beforehand (--token, STRATA_REGISTRY_TOKEN)
tok=$(curl -sf -u "alice:$TOK_PASS" \
  "http://127.0.0.1:$TOK_PORT/token?service=strata-test-registry&scope=repository:team/other:pull,push" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')
expect_ok "$STRATA" --store "$S" publish demo:1 --registry "$R/team/other:1" --insecure --token "$tok"
[ "$(tail -n 1 "$T/out")" = "$man" ] || fail "--token push gave another manifest"
run env STRATA_REGISTRY_TOKEN="$tok" "$STRATA" --store "$S" publish demo:1 --registry "$R/team/other:1" --insecure
[ "$rc" -eq 0 ] || fail "push with STRATA_REGISTRY_TOKEN: $(cat "$T/err")"
grep -q "uploaded 0 blobs" "$T/err" || fail "re-push with a token: $(cat "$T/err")"
# that token is for team/other only
expect_fail 1 "registry http://$R: HEAD blob sha256:[0-9a-f]+: HTTP 401 \(the --token was refused\)" \
  "$STRATA" --store "$S" publish demo:1 --registry "$R/team/third:1" --insecure --token "$tok"
expect_fail 1 "the token is empty, too long or not printable" \
  "$STRATA" --store "$S" publish demo:1 --registry "$R/team/other:1" --insecure --token "$(printf 'a\tb')"
expect_fail 2 "give either --username or --token" pub_tok --username alice --token "$tok"
echo ok
