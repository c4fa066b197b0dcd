#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# `strata` is a lean launcher: it links neither gRPC, OSTree, GLib nor
# libcurl (so `env run` does not pay for loading them), runs `env run` and
# `version` itself and hands every other command, with its arguments and exit
# code, to strata-core; a strata-core that cannot be found is one clear error.
. "$(dirname "$0")/lib.sh"
command -v ldd >/dev/null || skip "ldd is not available"

ldd "$STRATA" >"$T/libs"
for lib in libgrpc libostree libglib libgio libcurl libarchive libyaml; do
  grep -q "$lib" "$T/libs" && fail "the launcher links $lib: $(grep "$lib" "$T/libs")"
done
core=$(dirname "$STRATA")/strata-core
[ -x "$core" ] || fail "no strata-core next to $STRATA"
grep -q libgrpc < <(ldd "$core") || fail "strata-core does not link gRPC (is it the full command?)"

expect_ok "$STRATA" version
grep -q '^strata [0-9]' "$T/out" || fail "version: $(cat "$T/out")"
# handed over: the store commands, global options first, exit codes kept
expect_ok "$STRATA" --store "$T/s" store init
[ -f "$T/s/config" ] || fail "store init through the launcher made no store"
expect_ok "$STRATA" -q --store "$T/s" images
expect_fail 2 "unknown command 'nope'" "$STRATA" nope
expect_fail 1 "image nope:1" "$STRATA" --store "$T/s" inspect nope:1
# env run is the launcher's own: it fails the same way without strata-core
STRATA_CORE=/nonexistent/strata-core expect_fail 1 "node $T/no-node" \
  "$STRATA" env run --node-dir "$T/no-node" x:1
STRATA_CORE=/nonexistent/strata-core expect_fail 1 "cannot run STRATA_CORE=/nonexistent" \
  "$STRATA" --store "$T/s" images
echo PASS
