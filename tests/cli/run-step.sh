#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run steps in the bubblewrap sandbox: what a command creates, modifies and
# deletes becomes the layer (a deletion as a whiteout), the image's
# config.env is the environment, there is no network, a failing command
# fails the build naming the layer, the command and the status and tags
# nothing, the command's output shows in the build output, the sandbox
# leaves nothing behind, and a run layer is cached and reproducible. The
# commands run over an overlay (only what they change is packed); the same
# recipe run on the whole unpacked tree (STRATA_RUN_OVERLAY=0, the path taken
# where mounts are not allowed) gives the same image. No index is stored that
# no image or build key names, and a failing build stores nothing.
. "$(dirname "$0")/lib.sh"
need_root
command -v bwrap >/dev/null || skip "bwrap not installed"

W=$T/w
R=$W/rootfs
mkdir -p "$R/bin" "$W/base/etc" "$W/base/data/old"
# a tiny root: a few binaries of this system and the libraries they load
for b in sh ls cat echo mkdir rm touch ln chmod; do
  cp -L "/bin/$b" "$R/bin/$b"
  for lib in $(ldd "/bin/$b" | grep -o '/[^ ]*'); do
    mkdir -p "$R$(dirname "$lib")"
    cp -L "$lib" "$R$lib"
  done
done
cp -a "$R" "$T/probe"
bwrap --unshare-all --bind "$T/probe" / --proc /proc --dev /dev /bin/sh -c 'echo ok' >/dev/null 2>&1 ||
  skip "bwrap cannot create a sandbox here"
rm -rf "$T/probe"
cd "$W"
printf 'original\n' >base/etc/conf
printf 'doomed\n' >base/etc/doomed
printf 'untouched\n' >base/etc/untouched
printf 'x\n' >base/data/old/file
mkdir -p base/was-dir/sub base/private
printf 'y\n' >base/was-dir/sub/file
printf 'z\n' >base/was-dir/top
printf 'f\n' >base/was-file
mkdir -p base/data/keep extra/sub
printf 'o1\n' >base/data/keep/old1
printf 'o2\n' >base/data/keep/old2
printf 'kept\n' >extra/kept
printf 's\n' >extra/sub/file
cat >r.yaml <<'EOF'
image: runner
tag: "${v}"
matrix:
  v: [one]
layers:
  - name: root
    sources:
      - dir: ./rootfs
      - dir: ./base
  - name: work
    sources:
      - file: ./base/etc/conf
        dest: /etc/from-source
      - dir: ./extra
        dest: /opt/extra
    run:
      - "echo line one; echo line two >&2; mkdir -p /made; echo created > /made/new"
      - "echo modified >> /etc/conf; rm /etc/doomed; rm -r /data/old"
      - "echo \"$FOO\" > /out; echo \"$PATH\" > /path; echo \"$HOME\" > /home-var"
      - "echo ${v} > /var-subst; echo $$$$ > /dollar"
      - "cat /proc/net/dev > /netdev; ls /sys/class/net > /sysnet 2>&1 || true"
      - "cat /etc/from-source > /seen-source; rm /etc/from-source"
      - "rm -r /was-dir && echo now-a-file > /was-dir"
      - "rm /was-file && mkdir /was-file && echo inner > /was-file/inner"
      - "echo linked > /h1 && ln /h1 /h2 && ln -s h1 /sym"
      - "chmod 0700 /private"
      - "rm -r /data/keep && mkdir /data/keep && echo n > /data/keep/n"
      - "rm -r /opt/extra/sub && echo changed >> /opt/extra/kept"
config:
  env: {FOO: "bar baz", PATH: "/bin:/usr/bin"}
EOF
S=$T/store
export TMPDIR=$T/tmp
mkdir -p "$TMPDIR"
# every layer index in store $1 is a layer of one of the images $2...
assert_indexes_of_images() {
  local store=$1 i
  shift
  find "$store/indexes" -type f -printf 'sha256:%f\n' | sort >"$T/indexes"
  for i in "$@"; do
    st "$store" inspect "$i" | grep -oE 'sha256:[0-9a-f]{64}' || true
  done | sort -u >"$T/referenced"
  comm -23 "$T/indexes" "$T/referenced" >"$T/orphans"
  [ ! -s "$T/orphans" ] || fail "indexes no image refers to: $(cat "$T/orphans")"
}
STRATA_LOG=debug expect_ok st "$S" build r.yaml
grep -qE '^  \[2/2\] work +built ' "$T/out" || fail "work not built: $(cat "$T/out")"
grep -q 'run (overlay): ' "$T/err" || fail "the commands did not run over an overlay"
assert_indexes_of_images "$S" runner:one
[ "$(wc -l <"$T/indexes")" -eq 2 ] || fail "indexes after the first build: $(cat "$T/indexes")"
grep -q 'line one' "$T/err" || fail "stdout of the command not in the build output: $(cat "$T/err")"
grep -q 'line two' "$T/err" || fail "stderr of the command not in the build output: $(cat "$T/err")"
grep -q 'work.*line one' "$T/err" || fail "command output not attributed to the layer"
[ -z "$(ls -A "$TMPDIR")" ] || fail "run step left files in TMPDIR: $(ls -A "$TMPDIR")"
img=$(grep -E '^runner:one sha256:' "$T/out" | cut -d' ' -f2)

expect_ok st "$S" export runner:one "$T/ex"
E=$T/ex
[ "$(cat "$E/made/new")" = created ] || fail "created file missing"
printf 'original\nmodified\n' | cmp -s - "$E/etc/conf" || fail "modified file: $(cat "$E/etc/conf")"
[ ! -e "$E/etc/doomed" ] || fail "deleted file still exported"
[ ! -e "$E/data/old" ] && [ -d "$E/data" ] || fail "deleted directory"
[ "$(cat "$E/etc/untouched")" = untouched ] || fail "untouched lower file"
[ "$(cat "$E/out")" = "bar baz" ] || fail "config.env FOO not seen: '$(cat "$E/out")'"
[ "$(cat "$E/path")" = "/bin:/usr/bin" ] || fail "config.env PATH not seen"
[ -z "$(cat "$E/home-var")" ] || fail "the host environment leaked: HOME='$(cat "$E/home-var")'"
[ "$(cat "$E/var-subst")" = one ] || fail "\${v} not substituted"
[ "$(cat "$E/dollar")" != '$$' ] || fail "\$\$\$\$ did not reach the shell as \$\$"
[ "$(cat "$E/seen-source")" = original ] || fail "this layer's sources not visible to run"
[ ! -e "$E/etc/from-source" ] || fail "a source file removed by run is still there"
[ -f "$E/was-dir" ] && [ "$(cat "$E/was-dir")" = now-a-file ] || fail "directory replaced by a file"
[ "$(cat "$E/was-file/inner")" = inner ] || fail "file replaced by a directory"
[ "$(stat -c %i "$E/h1")" = "$(stat -c %i "$E/h2")" ] || fail "hardlink made by run not kept"
[ "$(cat "$E/h2")" = linked ] && [ "$(readlink "$E/sym")" = h1 ] || fail "hardlink/symlink made by run"
[ "$(stat -c %a "$E/private")" = 700 ] || fail "chmod of a lower directory lost"
[ "$(ls "$E/data/keep")" = n ] || fail "directory replaced by a new one: $(ls "$E/data/keep")"
[ ! -e "$E/opt/extra/sub" ] || fail "a source directory removed by run is still there"
printf 'kept\nchanged\n' | cmp -s - "$E/opt/extra/kept" || fail "source file changed by run"
# no network: only the loopback device
ifaces=$(tail -n +3 "$E/netdev" | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')
[ "$ifaces" = "lo " ] || fail "network devices in the sandbox: '$ifaces'"
grep -Eq '^(lo)?$' "$E/sysnet" || ! grep -q eth "$E/sysnet" || fail "/sys/class/net: $(cat "$E/sysnet")"
# bwrap's mount points did not end up in the image
for d in proc dev tmp; do
  [ ! -e "$E/$d" ] || fail "/$d of the sandbox is in the image"
done

# the run layer itself: new and changed entries and whiteouts, nothing else
expect_ok st "$S" inspect runner:one
work=$(awk '$1 == "work" {print $2}' "$T/out")
[[ $work =~ $DIGEST_RE ]] || fail "no work layer"
expect_ok st "$S" layer ls "$work"
cp "$T/out" "$T/work.ls"
grep -qE ' /etc/doomed \(whiteout\)$' "$T/work.ls" || fail "no whiteout for /etc/doomed: $(cat "$T/work.ls")"
grep -qE ' /data/old \(whiteout\)$' "$T/work.ls" || fail "no whiteout for /data/old"
grep -q ' /data/old/file' "$T/work.ls" && fail "whiteout below a whited-out directory"
grep -qE ' /etc/conf$' "$T/work.ls" || fail "modified file not in the layer"
grep -qE ' /made/new$' "$T/work.ls" || fail "created file not in the layer"
grep -qE ' /etc/untouched$' "$T/work.ls" && fail "an unchanged lower file was copied into the layer"
grep -qE ' /bin/' "$T/work.ls" && fail "unchanged binaries copied into the layer"
grep -qE ' /etc/from-source' "$T/work.ls" && fail "a source file removed by run is in the layer"
grep -qE ' /opt/extra/sub' "$T/work.ls" && fail "a source dir removed by run is in the layer"
grep -qE ' /data/keep/old1 \(whiteout\)$' "$T/work.ls" || fail "no whiteout in a replaced directory"
grep -qE ' /data/keep/n$' "$T/work.ls" || fail "new file of a replaced directory"
[ "$(grep -c '(whiteout)' "$T/work.ls")" -eq 4 ] || fail "whiteouts: $(grep whiteout "$T/work.ls")"

# --- cached, and reproducible in a fresh store ---
expect_ok st "$S" build r.yaml
grep -qE '^  \[2/2\] work +cached ' "$T/out" || fail "work not cached: $(cat "$T/out")"
grep -q 'line one' "$T/err" && fail "a cached run step ran again"
grep -qx "runner:one $img" "$T/out" || fail "rebuild changed the image"
expect_ok st "$T/store2" build r.yaml
grep -qx "runner:one $img" "$T/out" || fail "run layer not reproducible: $(cat "$T/out")"
# the same layer when the commands run on the whole tree, without an overlay
STRATA_RUN_OVERLAY=0 STRATA_LOG=debug expect_ok st "$T/store3" build r.yaml
grep -q 'run (overlay): ' "$T/err" && fail "STRATA_RUN_OVERLAY=0 still used an overlay"
grep -qx "runner:one $img" "$T/out" || fail "overlay and whole-tree runs differ: $(cat "$T/out")"
assert_indexes_of_images "$T/store3" runner:one
# without the right to mount (CAP_SYS_ADMIN dropped) the build falls back to
# the whole tree by itself, with the same result
if command -v setpriv >/dev/null; then
  STRATA_LOG=debug expect_ok setpriv --bounding-set -sys_admin -- "$STRATA" --store "$T/store4" build r.yaml
  grep -q 'cannot mount the overlay.*running on the whole tree' "$T/err" ||
    fail "no fallback without CAP_SYS_ADMIN: $(grep -i overlay "$T/err")"
  grep -qx "runner:one $img" "$T/out" || fail "fallback without CAP_SYS_ADMIN differs: $(cat "$T/out")"
fi
# the environment is part of a run layer's key
sed -i 's/FOO: "bar baz"/FOO: "other"/' r.yaml
expect_ok st "$S" build r.yaml
grep -qE '^  \[1/2\] root +cached ' "$T/out" || fail "root rebuilt for an env change"
grep -qE '^  \[2/2\] work +built ' "$T/out" || fail "env change did not rebuild the run layer"
expect_ok st "$S" export runner:one "$T/ex-env"
[ "$(cat "$T/ex-env/out")" = other ] || fail "new env not seen"

# --- a failing command ---
cat >fail.yaml <<'EOF'
image: failer
layers:
  - name: root
    sources:
      - dir: ./rootfs
  - name: broken
    run:
      - "echo before the failure; touch /partial"
      - "echo about to fail; exit 3"
      - "echo never > /never"
EOF
S=$T/store-fail
expect_ok st "$S" build r.yaml
expect_fail 1 "layer 'broken'.*'echo about to fail; exit 3'.*status 3" st "$S" build fail.yaml
grep -q 'about to fail' "$T/err" || fail "output of the failing command not shown"
grep -q 'never' "$T/err" && fail "a command after the failing one ran"
grep -q '^failer:latest sha256:' "$T/out" && fail "image line printed for a failed build"
expect_fail 1 "not found" st "$S" inspect failer:latest
[ -z "$(ls -A "$TMPDIR")" ] || fail "failed run step left files in TMPDIR: $(ls -A "$TMPDIR")"
# killed by a signal
sed -i 's/exit 3/kill -9 $$$$/' fail.yaml
expect_fail 1 "layer 'broken'.*(signal 9|status 137)" st "$S" build fail.yaml
expect_fail 1 "not found" st "$S" inspect failer:latest
# a command that does not exist
sed -i 's/kill -9 .*"/no-such-command-xyz"/' fail.yaml
expect_fail 1 "layer 'broken'.*no-such-command-xyz.*status 127" st "$S" build fail.yaml
# the failed layer stored no index: only runner:one's and the root of fail.yaml
expect_ok st "$S" plan fail.yaml
grep -qE '^  \[1/2\] root .* cached$' "$T/out" || fail "fail.yaml's root layer not cached: $(cat "$T/out")"
grep -qE '^  \[2/2\] broken .* to build$' "$T/out" || fail "failed layer recorded: $(cat "$T/out")"
[ "$(find "$S/indexes" -type f | wc -l)" -eq 3 ] || fail "indexes after failed builds: $(find "$S/indexes" -type f)"
expect_ok st "$S" store fsck
echo PASS
