# SPDX-License-Identifier: Apache-2.0
# Helpers for the OCI tests (tests/cli/oci-*.sh); source after lib.sh.
#   oci_tools                    skip unless skopeo and umoci are installed
#   oci_inputs DIR               a synthetic root and recipe (DIR/r.yaml, image demo:1):
#                                owners, modes incl. setuid and sticky, symlinks, a
#                                hardlink, an xattr, a deleted file and a deleted dir
#   oci_build_demo               oci_inputs in W=$T/w (the working dir from then on), built
#                                into the store S=$T/store as demo:1
#   compare_rootfs A B           the two root file systems have the same entries,
#                                contents, types, modes, owners, symlink targets,
#                                hardlink groups and xattrs (tree_manifest)
#   start_registry               a docker-registry on 127.0.0.1:$REG_PORT, storage in $T; lib.sh
#                                killed at exit
#   start_htpasswd_registry      a docker-registry with htpasswd (bcrypt) auth over HTTPS on
#                                127.0.0.1:$HT_PORT: user alice, password $HT_PASS; its
#                                self-signed certificate is $T/ht-tls.crt
#   start_token_registry         a token server (oci-token-server.py) on 127.0.0.1:$TOK_PORT,
#                                requests logged to $T/token.log, users alice ($TOK_PASS, pull
#                                and push) and bob (pull only), and a docker-registry with
#                                token auth trusting it on 127.0.0.1:$TREG_PORT (plain HTTP)
#   manifest_digest_of_tag L TAG the manifest digest index.json of layout L gives TAG
#   umoci_base L WANT            an OCI layout L (made by umoci) with image v1: two layers
#                                (the second whiteouts a file and a directory), set-id bits,
#                                a hardlink, a symlink, owners, an xattr, and a config (Env
#                                FOO=base KEEP=1, Entrypoint /bin/sh, Cmd -c true, WorkingDir
#                                /home/user, Labels vendor=acme tier=base); umoci's unpack of
#                                it in WANT (rootfs/)

oci_tools() {
  command -v skopeo >/dev/null || skip "skopeo not installed"
  command -v umoci >/dev/null || skip "umoci not installed"
}

oci_inputs() {
  local d=$1
  mkdir -p "$d/root/etc" "$d/root/usr/bin" "$d/root/srv/data/sub" "$d/root/tmp" "$d/root/gone" \
    "$d/up/etc" "$d/up/opt"
  printf 'welcome\n' >"$d/root/etc/motd"
  printf 'keep\n' >"$d/root/etc/keep"
  text_file "$d/root/usr/bin/big" 200000
  printf '#!/bin/sh\necho tool\n' >"$d/root/usr/bin/tool"
  chmod 4755 "$d/root/usr/bin/tool"
  chmod 1777 "$d/root/tmp"
  ln "$d/root/etc/keep" "$d/root/etc/keep-link"
  ln -s ../etc/motd "$d/root/usr/motd"
  ln -s /etc/keep "$d/root/usr/abs-link"
  printf 'owned\n' >"$d/root/srv/data/sub/f"
  chown -R 1001:1002 "$d/root/srv/data"
  chmod 0700 "$d/root/srv/data/sub"
  printf 'x\n' >"$d/root/gone/x"
  setfattr -n user.strata -v test "$d/root/etc/motd" 2>/dev/null || true
  printf 'changed\n' >"$d/up/etc/motd"
  printf 'opt\n' >"$d/up/opt/file"
  cat >"$d/r.yaml" <<'Y'
image: demo
tag: "1"
layers:
  - name: base
    sources:
      - dir: ./root
        owner: source
  - name: top
    sources:
      - dir: ./up
    delete: [/etc/keep-gone, /gone, /usr/abs-link]
config:
  env: {PATH: "/usr/bin:/bin", LANG: C.UTF-8}
  entrypoint: ["/bin/sh", "-c"]
  workdir: /srv
  labels: {cuda: "12.4", framework: none}
Y
}

oci_build_demo() {
  W=$T/w
  oci_inputs "$W"
  cd "$W"
  S=$T/store
  expect_ok "$STRATA" --store "$S" build r.yaml
}

compare_rootfs() {
  assert_same_tree "$1" "$2"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_registry NAME PORT [EXTRA-YAML]: docker-registry with storage in $T/NAME,
# config $T/NAME.yml, log $T/NAME.log; killed at exit (lib.sh)
run_registry() {
  local name=$1 port=$2 extra=${3:-}
  command -v docker-registry >/dev/null || skip "docker-registry not installed"
  mkdir -p "$T/$name"
  cat >"$T/$name.yml" <<Y
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $T/$name
http:
  addr: 127.0.0.1:$port
$extra
Y
  docker-registry serve "$T/$name.yml" >"$T/$name.log" 2>&1 &
  wait_until 20 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null ||
    fail "docker-registry $name did not start: $(cat "$T/$name.log")"
}

start_registry() {
  REG_PORT=$(free_port)
  run_registry registry "$REG_PORT"
}

start_htpasswd_registry() {
  command -v htpasswd >/dev/null || skip "htpasswd not installed (apache2-utils)"
  HT_PORT=$(free_port)
  HT_PASS=ht-$RANDOM-secret
  htpasswd -Bbc "$T/htpasswd" alice "$HT_PASS" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$T/ht-tls.key" -out "$T/ht-tls.crt" 2>/dev/null
  run_registry ht-registry "$HT_PORT" "  tls:
    certificate: $T/ht-tls.crt
    key: $T/ht-tls.key
auth:
  htpasswd:
    realm: strata-test
    path: $T/htpasswd"
}

start_token_registry() {
  # Debian's python3-jwt and python3-cryptography
  /usr/bin/python3 -c 'import jwt, cryptography' 2>/dev/null ||
    skip "python3-jwt or python3-cryptography is not installed"
  TOK_PASS=tok-$RANDOM-secret
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=strata-test-issuer \
    -keyout "$T/token.key" -out "$T/token.crt" 2>/dev/null
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/oci-token-server.py" "$T/token.port" "$T/token.log" \
    "$T/token.key" "$T/token.crt" strata-test-issuer strata-test-registry \
    "alice:$TOK_PASS:pull,push" "bob:bob-pass:pull" 2>"$T/token-server.log" &
  wait_until 20 test -s "$T/token.port" || fail "token server did not start: $(cat "$T/token-server.log")"
  TOK_PORT=$(cat "$T/token.port")
  : >"$T/token.log"
  TREG_PORT=$(free_port)
  run_registry token-registry "$TREG_PORT" "auth:
  token:
    realm: http://127.0.0.1:$TOK_PORT/token
    service: strata-test-registry
    issuer: strata-test-issuer
    rootcertbundle: $T/token.crt"
}

manifest_digest_of_tag() {
  python3 - "$1" "$2" <<'P'
import json, sys
idx = json.load(open(sys.argv[1] + "/index.json"))
for m in idx["manifests"]:
    if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == sys.argv[2]:
        print(m["digest"])
P
}

umoci_base() {
  local L=$1 want=$2 b
  b=$(mktemp -d "$T/umoci-base.XXXXXX")
  expect_ok umoci init --layout "$L"
  expect_ok umoci new --image "$L:v1"
  expect_ok umoci unpack --image "$L:v1" "$b/b"
  local R=$b/b/rootfs
  mkdir -p "$R/etc" "$R/usr/bin" "$R/var/cache/junk" "$R/home/user"
  printf 'base motd\n' >"$R/etc/motd"
  printf 'drop me\n' >"$R/etc/drop"
  printf 'junk\n' >"$R/var/cache/junk/a"
  text_file "$R/usr/bin/big" 300000
  printf '#!/bin/sh\n' >"$R/usr/bin/tool"
  chmod 4755 "$R/usr/bin/tool"
  ln "$R/usr/bin/tool" "$R/usr/bin/tool-link"
  ln -s ../etc/motd "$R/usr/motd"
  chown -R 1000:1000 "$R/home/user"
  chmod 0750 "$R/home/user"
  setfattr -n user.base -v yes "$R/etc/motd" 2>/dev/null || true
  expect_ok umoci repack --image "$L:v1" "$b/b"
  rm "$R/etc/drop"
  rm -r "$R/var/cache/junk"
  printf 'second layer\n' >"$R/etc/second"
  expect_ok umoci repack --image "$L:v1" "$b/b"
  expect_ok umoci config --image "$L:v1" --config.env FOO=base --config.env KEEP=1 \
    --config.entrypoint /bin/sh --config.cmd -c --config.cmd true \
    --config.workingdir /home/user --config.label vendor=acme --config.label tier=base
  expect_ok umoci unpack --image "$L:v1" "$want"
}
