#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The node as an ordinary user (nobody): prewarm makes a bare-user-only OSTree
# repo, env run starts the environment in an unprivileged sandbox (its writes
# land in the per-run overlay; the checkout stays pristine and the repo fscks
# clean), env ls lists it, node gc frees it and reports what is left.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node-lib.sh"
need_root
command -v ostree >/dev/null || skip "ostree not installed"
command -v setpriv >/dev/null || skip "setpriv (util-linux) not installed"
need_sandbox
id nobody >/dev/null 2>&1 || skip "no user nobody"

W=$T/w
mkdir -p "$W/app"
tiny_root "$W/rootfs"
printf 'hello\n' >"$W/app/hello"
S=$T/store
cd "$W"
tiny_recipe "$W" v1
expect_ok st "$S" build r.yaml
img=$(awk '$1 == "tiny:v1" && $2 ~ /^sha256:/ {print $2}' "$T/out")
chmod 755 "$T"
U=$T/home
mkdir -p "$U"
chown nobody "$U"
as_user() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups env HOME="$U" "$@"; }
as_user bwrap --unshare-all --ro-bind / / /bin/true 2>/dev/null ||
  skip "unprivileged user namespaces are not available here"
N=$U/node

expect_ok as_user "$STRATA" prewarm --node-dir "$N" --from-store "$S" --json tiny:v1
[ "$(jfield result)" = prewarmed ] && [ "$(jfield digest)" = "$img" ] || fail "prewarm: $(cat "$T/out")"
grep -qx 'mode=bare-user-only' "$N/repo/config" || fail "repo mode: $(grep mode "$N/repo/config")"
[ "$(stat -c %U "$N/checkouts/${img#sha256:}")" = nobody ] || fail "checkout not owned by the user"
ofsck "$N"
tree_manifest_nolinks "$N/checkouts/${img#sha256:}" >"$T/m.before"

expect_ok as_user "$STRATA" env run --node-dir "$N" tiny:v1 -- \
  sh -c 'cat /app/hello; echo scratch >/app/new; cat /app/new; rm /app/hello'
printf 'hello\nscratch\n' | diff - "$T/out" || fail "env run as a user: $(cat "$T/out")"
expect_ok as_user "$STRATA" env run --node-dir "$N" tiny:v1 -- cat /app/hello
[ "$(cat "$T/out")" = hello ] || fail "the next run does not see the pristine tree"
tree_manifest_nolinks "$N/checkouts/${img#sha256:}" >"$T/m.after"
diff -u "$T/m.before" "$T/m.after" || fail "the checkout changed"
ofsck "$N"

expect_ok as_user "$STRATA" env ls --node-dir "$N"
grep -q '^tiny:v1 ' "$T/out" || fail "env ls: $(cat "$T/out")"
expect_ok as_user "$STRATA" node gc --node-dir "$N" --max-bytes 1
grep -q '^removed 1 image ' "$T/out" || fail "gc: $(cat "$T/out")"
after=$(sed -n 's/.* -> \(.*\)$/\1/p' "$T/out")
grep -q "node still takes $after, over --max-bytes" "$T/err" ||
  fail "gc warning does not name what is left ($after): $(cat "$T/err")"
[ ! -e "$N/checkouts/${img#sha256:}" ] || fail "gc left the checkout"
ofsck "$N"
echo PASS
