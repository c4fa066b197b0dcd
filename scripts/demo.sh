#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, end to end on a local store (no services): install packages,
# build strata, fetch the Debian packages of the example recipe
# (recipes/debian-pytorch.yaml; cached in /var/cache/strata-fixtures, outside
# the repository), build its images (two cells sharing the base and
# framework layers), build again (every layer cached), export one image and
# run `import torch` in it with bubblewrap.
#
# Each step is a function listed in `steps` at the bottom; later steps
# (serving the store, pre-warming a node, `strata env run`) are appended
# there. Needs root (run steps, roots owned by root). Works in
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

step_store() {
  say "the store"
  run "$strata" store stats
  run "$strata" store fsck
}

steps=(step_setup step_fetch step_build step_export_run step_store)
for s in "${steps[@]}"; do
  "$s"
done
echo
echo "demo complete: store at $STRATA_STORE, exported root at $work/root"
