#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The oci: recipe source: a layout made by umoci (two layers, the second with
# whiteouts for a file and a directory, and a config) builds into an image
# whose root equals umoci's unpack and whose config is the base's under the
# recipe's; publish -> umoci unpack gives the same files (round trip); a
# --zstd layout and a skopeo-copied layout import too. Hostile layouts are
# in oci-bad-input.sh.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/oci-lib.sh"
need_root
oci_tools

W=$T/w
mkdir -p "$W"
cd "$W"
S=$T/store

# --- a base image made by umoci ---
umoci_base base "$T/want"

mkdir -p extra/opt
printf 'extra\n' >extra/opt/extra
cat >r.yaml <<'Y'
image: imported
tag: "1"
layers:
  - name: base
    sources:
      - oci: ./base
        ref: v1
config:
  env: {FOO: recipe}
  labels: {tier: recipe}
Y
expect_ok "$STRATA" --store "$S" build r.yaml
expect_ok "$STRATA" --store "$S" export imported:1 "$T/got"
compare_rootfs "$T/want/rootfs" "$T/got"
[ ! -e "$T/got/etc/drop" ] && [ ! -e "$T/got/var/cache/junk" ] || fail "whiteouts not applied"
expect_ok "$STRATA" --store "$S" inspect imported:1
for want in 'FOO=recipe' 'KEEP=1' 'tier=recipe' 'vendor=acme' 'workdir   /home/user' \
  'entrypoint /bin/sh -c true'; do
  grep -qF "$want" "$T/out" || fail "config lacks '$want': $(cat "$T/out")"
done
# cached: a rebuild of an unchanged base image reads no layer
expect_ok "$STRATA" --store "$S" build r.yaml
grep -q 'cached' "$T/out" || fail "unchanged oci source rebuilt: $(cat "$T/out")"

# --- round trip: publish, umoci unpack, same files ---
cat >r2.yaml <<'Y'
image: imported
tag: "2"
layers:
  - name: base
    sources:
      - oci: ./base
        ref: v1
  - name: extra
    sources:
      - dir: ./extra
Y
expect_ok "$STRATA" --store "$S" build r2.yaml
expect_ok "$STRATA" --store "$S" publish imported:2 --oci "$T/out-lay:2"
expect_ok umoci unpack --image "$T/out-lay:2" "$T/rt"
expect_ok "$STRATA" --store "$S" export imported:2 "$T/rt-want"
compare_rootfs "$T/rt-want" "$T/rt/rootfs"
[ -f "$T/rt/rootfs/opt/extra" ] || fail "round trip lost /opt/extra"
# zstd layers, and a layout written by skopeo, import to the same tree
expect_ok "$STRATA" --store "$S" publish imported:1 --oci "$T/zlay:z" --zstd
expect_ok skopeo copy "oci:$W/base:v1" "oci:$T/sklay:sk"
for src in "$T/zlay z" "$T/sklay sk"; do
  set -- $src
  printf 'image: again\ntag: "%s"\nlayers:\n  - name: base\n    sources:\n      - oci: %s\n        ref: %s\n' \
    "$2" "$1" "$2" >"r-$2.yaml"
  expect_ok "$STRATA" --store "$S" build "r-$2.yaml"
  expect_ok "$STRATA" --store "$S" export "again:$2" "$T/again-$2"
  compare_rootfs "$T/want/rootfs" "$T/again-$2"
done

echo "ok"
