#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The node commands run clean under valgrind memcheck (GLib's suppressions,
# G_SLICE=always-malloc): prewarm (new, ready, a failure), env run, env ls,
# node status, node gc, env rm.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node-lib.sh"
need_root
command -v valgrind >/dev/null || skip "valgrind is not installed"
command -v ostree >/dev/null || skip "ostree not installed"
[ -z "${STRATA_SANITIZED:-}" ] || skip "sanitizer build"
need_sandbox

VG_ARGS=()
[ -f /usr/share/glib-2.0/valgrind/glib.supp ] && VG_ARGS=(--suppressions=/usr/share/glib-2.0/valgrind/glib.supp)

W=$T/w
mkdir -p "$W/app"
tiny_root "$W/rootfs"
printf 'hello\n' >"$W/app/hello"
rand_file "$W/app/data" 100000
S=$T/store
N=$T/node
cd "$W"
tiny_recipe "$W" v1
expect_ok st "$S" build r.yaml
vg 0 prewarm --node-dir "$N" --from-store "$S" -j 2 --json tiny:v1
grep -q '"result": "prewarmed"' "$T/out" || fail "prewarm: $(cat "$T/out")"
vg 0 prewarm --node-dir "$N" --from-store "$S" tiny:v1
vg 1 prewarm --node-dir "$N" --from-store "$S" tiny:nope
vg 0 env run --node-dir "$N" tiny:v1
[ "$(cat "$T/out")" = hello ] || fail "env run: $(cat "$T/out")"
vg 1 env run --node-dir "$N" tiny:nope
vg 0 env ls --node-dir "$N"
vg 0 node status --node-dir "$N"
vg 0 node gc --node-dir "$N" --max-bytes 1 --keep tiny:v1
vg 0 env rm --node-dir "$N" tiny:v1
echo PASS
