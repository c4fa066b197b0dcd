#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata env run on a pre-warmed image: the image's entrypoint, env and
# workdir; a given command instead of the entrypoint; its exit status; writes
# land in a per-run overlay and never in the hardlinked checkout (the repo
# fscks clean, the next run sees the pristine tree); NVIDIA devices and
# driver libraries are bound in when present (a fake host root) and their
# absence is no error. env ls / node status list the images; node gc frees
# least-recently-used images and never one in use or kept; env rm.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node-lib.sh"
need_root
command -v ostree >/dev/null || skip "ostree not installed"
need_sandbox

W=$T/w
mkdir -p "$W/app"
tiny_root "$W/rootfs"
printf 'hello\n' >"$W/app/hello"
S=$T/store
N=$T/node
cd "$W"
for v in v1 v2 v3; do
  rand_file "$W/app/data-$v" 100000
  tiny_recipe "$W" $v
  expect_ok st "$S" build r.yaml
done
expect_ok "$STRATA" prewarm --node-dir "$N" --from-store "$S" tiny:v1 tiny:v2 tiny:v3
img1=$(awk '$1 == "tiny:v1" {print $2}' "$T/out")
co=$N/checkouts/${img1#sha256:}
tree_manifest_nolinks "$co" >"$T/m.before"

run_env() { "$STRATA" env run --node-dir "$N" "$@"; }

# --- the entrypoint, env, workdir ---
expect_ok run_env tiny:v1
[ "$(cat "$T/out")" = hello ] || fail "entrypoint: '$(cat "$T/out")'"
expect_ok run_env tiny:v1 -- sh -c 'pwd; echo "$GREETING"; echo "$PATH"; echo "${HOME-unset}"'
printf '/app\nhi there\n/bin\nunset\n' | diff - "$T/out" || fail "workdir/env: $(cat "$T/out")"
expect_ok run_env --env EXTRA=1 --env GREETING=override --workdir /bin "$img1" sh -c 'pwd; echo $EXTRA $GREETING'
printf '/bin\n1 override\n' | diff - "$T/out" || fail "--env/--workdir: $(cat "$T/out")"
# the exit status of the command is the exit status of env run
run run_env tiny:v1 -- sh -c 'echo out; echo err >&2; exit 7'
[ "$rc" -eq 7 ] || fail "exit status $rc, want 7"
[ "$(cat "$T/out")" = out ] && grep -q '^err$' "$T/err" || fail "output of the command"
rc=0
run_env tiny:v1 -- sh -c 'kill -9 $$' >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 137 ] || fail "a command killed by SIGKILL gave $rc, want 137"

# --- writes go to a private overlay ---
expect_ok run_env tiny:v1 -- sh -c 'echo changed >> /app/hello; echo new > /bin/new; rm /app/data-v1; mkdir /made; cat /app/hello'
printf 'hello\nchanged\n' | diff - "$T/out" || fail "write in the overlay: $(cat "$T/out")"
tree_manifest_nolinks "$co" >"$T/m.after"
diff -u "$T/m.before" "$T/m.after" || fail "the checkout changed"
expect_ok run_env tiny:v1 -- sh -c 'cat /app/hello; ls /bin/new /made 2>&1 || true; ls /app'
grep -q changed "$T/out" && fail "a write of the previous run is visible"
grep -q 'data-v1' "$T/out" || fail "a delete of the previous run is visible"
ofsck "$N"
[ -z "$(ls -A "$N/run")" ] || fail "env run left files in $N/run: $(ls -A "$N/run")"

# --- GPU: bound when present, fine when absent ---
G=$T/gpu
mkdir -p "$G/dev" "$G/usr/lib/x86_64-linux-gnu" "$G/usr/bin"
echo fake-device >"$G/dev/nvidia0"
echo fake-ctl >"$G/dev/nvidiactl"
echo fake-cuda >"$G/usr/lib/x86_64-linux-gnu/libcuda.so.1"
echo fake-ml >"$G/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
export STRATA_GPU_ROOT=$G
expect_ok run_env tiny:v1 -- sh -c 'cat /dev/nvidia0 /dev/nvidiactl /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1'
printf 'fake-device\nfake-ctl\nfake-cuda\nfake-ml\n' | diff - "$T/out" || fail "GPU files: $(cat "$T/out")"
expect_ok run_env --no-gpu tiny:v1 -- sh -c 'ls /dev/nvidia0 2>&1 || echo absent'
grep -q absent "$T/out" || fail "--no-gpu still bound the device"
export STRATA_GPU_ROOT=$T/no-gpu-here
expect_ok run_env tiny:v1 -- sh -c 'ls /dev/nvidia0 2>&1 || echo absent'
grep -q absent "$T/out" || fail "no GPU: $(cat "$T/out")"
# driver libraries without a device (a CPU machine with the driver package) stay out
mkdir -p "$T/libs-only"
cp -a "$G/usr" "$T/libs-only/"
export STRATA_GPU_ROOT=$T/libs-only
expect_ok run_env tiny:v1 -- sh -c 'cat /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>/dev/null || echo absent'
grep -q absent "$T/out" || fail "driver libraries bound without a device: $(cat "$T/out")"
unset STRATA_GPU_ROOT
tree_manifest_nolinks "$co" >"$T/m.after"
diff -u "$T/m.before" "$T/m.after" || fail "the checkout changed"

# --- errors ---
expect_fail 1 "image tiny:nope is not pre-warmed on node $N" run_env tiny:nope
expect_fail 1 "node $T/nonode" "$STRATA" env run --node-dir "$T/nonode" tiny:v1
expect_fail 2 "no image given" run_env
expect_fail 2 "KEY=VALUE" run_env --env NOEQUALS tiny:v1
run run_env tiny:v1 -- /bin/no-such-command
[ "$rc" -ne 0 ] || fail "a missing command succeeded"

# --- env ls, node status ---
expect_ok "$STRATA" env ls --node-dir "$N"
[ "$(grep -c '^tiny:v[123] ' "$T/out")" -eq 3 ] || fail "env ls: $(cat "$T/out")"
expect_ok "$STRATA" node status --node-dir "$N"
grep -q '^images     3$' "$T/out" && grep -q '^disk free ' "$T/out" || fail "node status: $(cat "$T/out")"

# --- gc: least recently used first, never in use or kept ---
# use order: v2 long ago, v1 then v3 recently
img2=$(st "$S" inspect tiny:v2 | awk '$1 == "digest" {print $2}')
img3=$(st "$S" inspect tiny:v3 | awk '$1 == "digest" {print $2}')
touch -d '2020-01-01' "$N/used/${img2#sha256:}"
touch -d '2021-01-01' "$N/used/${img1#sha256:}"
touch -d '2022-01-01' "$N/used/${img3#sha256:}"
# a running environment on the least recently used image
"$STRATA" env run --node-dir "$N" tiny:v2 -- sleep 30 >/dev/null 2>&1 &
busy=$!
wait_until 10 sh -c "! flock -n -x '$N/checkouts/${img2#sha256:}.lock' true" || fail "env run holds no lock"
expect_fail 1 "in use by a running environment" "$STRATA" env rm --node-dir "$N" tiny:v2
expect_ok "$STRATA" node gc --node-dir "$N" --keep tiny:v3 --max-bytes 1
grep -q '^removed 1 image (1 kept: in use, 1 kept: pinned)' "$T/out" || fail "gc: $(cat "$T/out")"
[ -d "$N/checkouts/${img2#sha256:}" ] || fail "gc removed an image in use"
[ -d "$N/checkouts/${img3#sha256:}" ] || fail "gc removed a kept image"
[ ! -e "$co" ] || fail "gc did not remove the least recently used free image"
kill "$busy"
wait "$busy" 2>/dev/null || true
# the sandbox died with it: the lock is free again
wait_until 10 flock -n -x "$N/checkouts/${img2#sha256:}.lock" true || fail "lock still held after the env ended"
ofsck "$N"
expect_ok run_env tiny:v3 -- cat /app/data-v3
cmp -s "$T/out" "$W/app/data-v3" || fail "a kept image after gc"
# the removed image comes back with a prewarm
prewarm_json "$N" "$S" tiny:v1
[ "$(jfield result)" = prewarmed ] || fail "re-prewarm after gc: $(cat "$T/out")"
# gc without a limit removes no image
expect_ok "$STRATA" node gc --node-dir "$N"
grep -q '^removed 0 images' "$T/out" || fail "gc without limit: $(cat "$T/out")"
expect_ok "$STRATA" env ls --node-dir "$N"
[ "$(grep -c '^tiny:v[123] ' "$T/out")" -eq 3 ] || fail "env ls after gc: $(cat "$T/out")"
# env rm frees the image's own objects
expect_ok "$STRATA" env rm --node-dir "$N" tiny:v1 tiny:v2
expect_ok "$STRATA" env ls --node-dir "$N"
[ "$(grep -c '^tiny:' "$T/out")" -eq 1 ] || fail "env ls after rm: $(cat "$T/out")"
expect_fail 1 "not pre-warmed" run_env tiny:v1
ostree refs --repo="$N/repo" >"$T/refs"
[ "$(grep -c '^strata/image/' "$T/refs")" -eq 1 ] || fail "image refs after rm: $(cat "$T/refs")"
[ "$(grep -c '^strata/layer/' "$T/refs")" -eq 2 ] || fail "layer refs after rm: $(cat "$T/refs")"
ofsck "$N"
expect_ok st "$N/cache" store fsck
grep -q '^checked .* 2 indexes, 1 manifests: ok$' "$T/out" || fail "cache after rm: $(cat "$T/out")"
expect_ok run_env tiny:v3
echo PASS
