# SPDX-License-Identifier: Apache-2.0
# Helpers for the node tests (source after lib.sh):
#   tiny_root DIR            a minimal runnable root: a few host binaries and the
#                            libraries ldd says they load (never a copy of /usr)
#   tiny_recipe DIR TAG      writes DIR/r.yaml: image 'tiny:TAG', layers root and
#                            app (DIR/app as /app, a run step deleting /bin/touch)
#   need_sandbox             skip unless bwrap can build a sandbox here
#   prewarm_json NODE STORE IMAGE...  strata prewarm --json, output in $T/out
#   jfield KEY               a number or string field of the first image in $T/out
#   ofsck NODE               ostree fsck of the node repo must be clean

tiny_root() {
  local r=$1 b lib
  mkdir -p "$r/bin" "$r/tmp"
  for b in sh ls cat echo mkdir rm touch ln chmod env pwd sleep stat; do
    cp -L "/bin/$b" "$r/bin/$b"
    for lib in $(ldd "/bin/$b" | grep -o '/[^ ]*'); do
      mkdir -p "$r$(dirname "$lib")"
      cp -L "$lib" "$r$lib"
    done
  done
}

tiny_recipe() {
  cat >"$1/r.yaml" <<EOR
image: tiny
tag: "$2"
layers:
  - name: root
    sources:
      - dir: ./rootfs
  - name: app
    sources:
      - dir: ./app
        dest: /app
    run:
      - "rm /bin/touch"
config:
  env: {GREETING: "hi there", PATH: "/bin"}
  workdir: /app
  entrypoint: ["/bin/cat", "/app/hello"]
EOR
}

need_sandbox() {
  command -v bwrap >/dev/null || skip "bwrap not installed"
  mkdir -p "$T/probe"
  tiny_root "$T/probe"
  bwrap --unshare-all --bind "$T/probe" / --proc /proc --dev /dev /bin/sh -c 'echo ok' \
    >/dev/null 2>&1 || skip "bwrap cannot create a sandbox here"
  rm -rf "$T/probe"
}

prewarm_json() {
  local node=$1 store=$2
  shift 2
  expect_ok "$STRATA" prewarm --node-dir "$node" --from-store "$store" --json "$@"
}

jfield() {
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["images"][0][sys.argv[2]]; print(v)' \
    "$T/out" "$1"
}

ofsck() {
  ostree fsck --repo="$1/repo" >"$T/fsck.out" 2>&1 || {
    cat "$T/fsck.out" >&2
    fail "ostree fsck of $1/repo"
  }
  grep -q 'no errors found' "$T/fsck.out" || fail "ostree fsck: $(cat "$T/fsck.out")"
}

# A manifest of a tree without link counts and hardlink groups (a checkout
# hardlinks identical files into the repo).
tree_manifest_nolinks() {
  tree_manifest "$1" | sed -E 's/ nlink=[0-9]+ group=[^ ]+//'
}

# start_server STORE: strata serve on a free loopback port, stopped at exit;
# sets $ADDR.
start_server() {
  local port i
  for i in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$STRATA" --store "$1" serve --listen "127.0.0.1:$port" --no-access-log >"$T/serve.log" 2>&1 &
    SERVER_PID=$!
    on_exit "kill $SERVER_PID 2>/dev/null || true"
    ADDR=127.0.0.1:$port
    if wait_until 10 grep -qs 'listening on' "$T/serve.log"; then
      return 0
    fi
    kill "$SERVER_PID" 2>/dev/null || true
  done
  fail "strata serve did not start: $(cat "$T/serve.log")"
}
