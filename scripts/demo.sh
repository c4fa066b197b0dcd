#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, end to end on embedded defaults (a local store, no services):
# installs packages, builds strata, packs a real file tree (this machine's
# Python standard library and docs) into a layer, packs a modified copy to
# show deduplication, unpacks the layer, checks the result is identical, and
# prints store statistics and an fsck.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
strata="$PWD/build/cli/strata"

work="${STRATA_DEMO_DIR:-/var/tmp/strata-demo}"
rm -rf "$work"
mkdir -p "$work"
export STRATA_STORE="$work/store"

run() { printf '\n$ %s\n' "$*"; "$@"; }

# A real tree: the Python standard library plus /usr/share/doc.
src="$work/tree"
mkdir -p "$src"
py=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
cp -a "$py" "$src/python"
cp -a /usr/share/doc "$src/doc"

run "$strata" store init
digest=$(run "$strata" layer pack "$src" | tail -n 1)
echo "layer: $digest"

# Change one file and add one: only the new bytes are stored.
echo "# local change" >> "$src/python/os.py"
head -c 1048576 /dev/urandom > "$src/new-data.bin"
digest2=$(run "$strata" layer pack "$src" | tail -n 1)
run "$strata" layer diff "$digest" "$digest2"

run "$strata" layer unpack "$digest2" "$work/unpacked"
run diff -r --no-dereference "$src" "$work/unpacked"
echo "unpacked tree is identical to the source"

run "$strata" layer ls "$digest2" | head -n 5
run "$strata" store stats
run "$strata" store fsck
echo
echo "demo complete: store at $STRATA_STORE"
