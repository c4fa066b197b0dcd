#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, end to end on a local store (no services): install packages,
# build strata, fetch the Debian packages of the example recipe
# (recipes/debian-pytorch.yaml; cached in /var/cache/strata-fixtures, outside
# the repository), build its images (two cells sharing the base and
# framework layers), build again (every layer cached), export one image and
# run `import torch` in it with bubblewrap.
#
# Then it serves the store with `strata serve` on 127.0.0.1 (a free port),
# pre-warms a fresh node directory from that server (`strata prewarm`: chunks
# into the node cache, layers and the image as OSTree commits, one read-only
# checkout) and runs `import torch` in the environment with `strata env run`.
#
# Each step is a function listed in `steps` at the bottom. Needs root (run steps, roots owned by root). Works in
# /var/tmp/strata-demo (STRATA_DEMO_DIR to change); the store is
# $STRATA_DEMO_DIR/store.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
repo=$PWD

work=${STRATA_DEMO_DIR:-/var/tmp/strata-demo}
[[ $work == /* && $work != / ]] || { echo "demo: STRATA_DEMO_DIR must be an absolute path" >&2; exit 2; }
export STRATA_STORE=$work/store
export TMPDIR=$work/tmp # run-step scratch trees: a few GB, not in /tmp
recipe=$repo/recipes/debian-pytorch.yaml
image=debian-pytorch:1.13-scipy-no
strata=$repo/build/cli/strata

say() { printf '\n== %s\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
die() { printf 'demo: FAILED: %s\n' "$*" >&2; exit 1; }

step_setup() {
  say "packages and build"
  [ "$(id -u)" -eq 0 ] || die "run as root (run steps in bubblewrap, images owned by root)"
  ./scripts/install-deps.sh
  [ -f build/build.ninja ] || meson setup build >/dev/null
  ninja -C build >/dev/null
  rm -rf -- "$work"
  mkdir -p "$work" "$TMPDIR"
}

step_fetch() {
  say "Debian packages of the example recipe (tests/fixtures/fetch-pytorch-debs.sh)"
  run tests/fixtures/fetch-pytorch-debs.sh >/dev/null
}

step_build() {
  say "build the recipe: 2 images, base and framework shared"
  run "$strata" store init
  local t0=$SECONDS
  run "$strata" build "$recipe"
  echo "(cold build: $((SECONDS - t0)) s)"
  say "build again: every layer cached"
  t0=$SECONDS
  run "$strata" build "$recipe"
  echo "(cached build: $((SECONDS - t0)) s)"
  run "$strata" images
  run "$strata" inspect "$image"
}

step_export_run() {
  say "export $image and import torch in it"
  run "$strata" export "$image" "$work/root"
  local -a sandbox=(bwrap --bind "$work/root" / --proc /proc --dev /dev --tmpfs /tmp
    --unshare-all --die-with-parent --clearenv --setenv PATH /usr/bin:/bin
    --setenv HOME /root --setenv LANG C.UTF-8)
  local got
  printf '$ %s\n' "${sandbox[*]} python3 -c 'import torch; print(torch.__version__)'"
  got=$("${sandbox[@]}" python3 -c 'import torch; print(torch.__version__)')
  echo "$got"
  [[ $got =~ ^[0-9]+\.[0-9]+ ]] || die "import torch printed '$got'"
}

server_pid=
stop_server() {
  [ -z "$server_pid" ] || { kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
  server_pid=
}
trap stop_server EXIT

step_serve() {
  say "serve the store on 127.0.0.1"
  printf '$ %s\n' "$strata serve --listen 127.0.0.1:0 --store $STRATA_STORE &"
  "$strata" serve --listen 127.0.0.1:0 --store "$STRATA_STORE" >"$work/serve.log" 2>&1 &
  server_pid=$!
  local i
  for i in $(seq 100); do
    grep -qs 'listening on' "$work/serve.log" && break
    kill -0 "$server_pid" 2>/dev/null || die "strata serve exited: $(cat "$work/serve.log")"
    sleep 0.2
  done
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/serve.log" | head -n 1)
  [ -n "$addr" ] || die "strata serve did not start: $(cat "$work/serve.log")"
  echo "serving on $addr"
}

step_prewarm() {
  say "pre-warm a fresh node directory from the server"
  local t0=$SECONDS
  run "$strata" prewarm --server "$addr" --node-dir "$work/node" "$image"
  echo "(full prewarm: $((SECONDS - t0)) s)"
  say "pre-warm again: nothing new, nothing fetched"
  run "$strata" prewarm --server "$addr" --node-dir "$work/node" "$image"
  run "$strata" node status --node-dir "$work/node"
}

step_env_run() {
  say "start the pre-warmed environment and import torch in it"
  local got
  printf '$ %s\n' "$strata env run --node-dir $work/node $image -- python3 -c 'import torch; print(torch.__version__)'"
  got=$("$strata" env run --node-dir "$work/node" "$image" -- python3 -c 'import torch; print(torch.__version__)')
  echo "$got"
  [[ $got =~ ^[0-9]+\.[0-9]+ ]] || die "import torch in the environment printed '$got'"
  stop_server
}

step_store() {
  say "the store"
  run "$strata" store stats
  run "$strata" store fsck
}

steps=(step_setup step_fetch step_build step_export_run step_serve step_prewarm step_env_run step_store)
for s in "${steps[@]}"; do
  "$s"
done
echo
echo "demo complete: store at $STRATA_STORE, exported root at $work/root, node at $work/node"
