# SPDX-License-Identifier: Apache-2.0
# Helpers for the OCI tests (tests/cli/oci-*.sh); source after lib.sh.
#   oci_tools                    skip unless skopeo and umoci are installed
#   oci_inputs DIR               a synthetic root and recipe (DIR/r.yaml, image demo:1):
#                                owners, modes incl. setuid and sticky, symlinks, a
#                                hardlink, an xattr, a deleted file and a deleted dir
#   compare_rootfs A B           the two root file systems have the same entries,
#                                contents, types, modes, owners, symlink targets,
#                                hardlink groups and xattrs (tree_manifest)
#   start_registry               a docker-registry on 127.0.0.1:$REG_PORT, storage in $T; lib.sh
#                                killed at exit
#   manifest_digest_of_tag L TAG the manifest digest index.json of layout L gives TAG

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

compare_rootfs() {
  assert_same_tree "$1" "$2"
}

start_registry() {
  command -v docker-registry >/dev/null || skip "docker-registry not installed"
  REG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$T/registry"
  cat >"$T/registry.yml" <<Y
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $T/registry
http:
  addr: 127.0.0.1:$REG_PORT
Y
  docker-registry serve "$T/registry.yml" >"$T/registry.log" 2>&1 &
  REG_PID=$!
  wait_until 20 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REG_PORT" 2>/dev/null ||
    fail "docker-registry did not start: $(cat "$T/registry.log")"
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
