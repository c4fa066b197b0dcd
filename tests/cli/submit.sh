#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds on a server: `strata submit` uploads the recipe's context and follows the build;
# `strata pull` then brings the image into another store with the digest a local build
# gives; an identical submission returns the same build; a failing run step is exit 1 with
# the failure and the command's output in the stream; an invalid recipe is exit 2 naming
# FILE:LINE:COL; a build goes on when its client is killed; a build running when the server
# is killed is failed after the restart; cancel; a pull token cannot submit.
. "$(dirname "$0")/lib.sh"
need_root
command -v bwrap >/dev/null || skip "bwrap not installed"

W=$T/w
mkdir -p "$W/rootfs/bin"
for b in sh echo cat sleep; do
  cp -L "/bin/$b" "$W/rootfs/bin/$b"
  for lib in $(ldd "/bin/$b" | grep -o '/[^ ]*'); do
    mkdir -p "$W/rootfs$(dirname "$lib")"
    cp -L "$lib" "$W/rootfs$lib"
  done
done
bwrap --unshare-all --bind "$W/rootfs" / --proc /proc --dev /dev /bin/sh -c true >/dev/null 2>&1 ||
  skip "bwrap cannot create a sandbox here"
rmdir "$W/rootfs/proc" "$W/rootfs/dev" "$W/rootfs/tmp" 2>/dev/null || true

recipe() { # NAME RUN-COMMAND
  cat >"$W/$1.yaml" <<EOF
image: $1
layers:
  - name: root
    sources:
      - dir: ./rootfs
  - name: app
    sources:
      - file: ./data/hello.txt
        dest: /hello.txt
    run:
      - "$2"
EOF
}
mkdir -p "$W/data"
echo "hello from the client" >"$W/data/hello.txt"
recipe ok 'echo building; cat /hello.txt > /copy'
recipe fails 'echo about to fail; exit 3'
recipe slow 'echo started; sleep 3; echo finished'
recipe hang 'echo started; sleep 600'
recipe hang2 'echo started2; sleep 600'
printf 'image: bad\nlayers:\n  - name: l\n    bogus: 1\n' >"$W/bad.yaml"

"$STRATA" token add "$T/tokens" builder build >"$T/tok-build" 2>/dev/null
"$STRATA" token add "$T/tokens" reader pull >"$T/tok-pull" 2>/dev/null
BUILD=$(cat "$T/tok-build")
PULL=$(cat "$T/tok-pull")

SERVER_PID=
start_server() {
  : >"$T/serve.log"
  TMPDIR=$T "$STRATA" serve --store "$T/server" --listen 127.0.0.1:0 --tokens "$T/tokens" \
    --builds 2 --grace 2 >>"$T/serve.log" 2>&1 &
  SERVER_PID=$!
  wait_until 30 grep -q 'listening on' "$T/serve.log" || fail "server did not start: $(cat "$T/serve.log")"
  ADDR=127.0.0.1:$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\) .*/\1/p' "$T/serve.log")
}
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
on_exit stop_server
start_server

submit() { "$STRATA" submit --server "$ADDR" --token "$BUILD" --store "$T/client" "$@"; }
show() { "$STRATA" builds --server "$ADDR" --token "$PULL" "$@"; }
build_id() { sed -n 's/^build \(sha256:[0-9a-f]*\).*/\1/p' "$T/out"; }
# Polls Builds.Get until the build is in STATE (a safety limit, not a timing check).
wait_state() { # ID STATE
  local i
  for ((i = 0; i < 600; i++)); do
    show "$1" >"$T/state" 2>&1 && grep -q "^state     $2" "$T/state" && return 0
    sleep 0.2
  done
  return 1
}

# a build on the server, pulled into another store: the digest of a local build
expect_ok submit "$W/ok.yaml"
grep -q '^build sha256:' "$T/out" || fail "no build id"
ID=$(build_id)
REMOTE=$(sed -n 's/^ok:latest \(sha256:[0-9a-f]*\)$/\1/p' "$T/out")
[ -n "$REMOTE" ] || fail "no image in: $(cat "$T/out")"
grep -q 'building' "$T/err" || fail "the run step's output is not in the stream"
grep -q 'built' "$T/out" || fail "no layer progress"
expect_ok "$STRATA" pull ok:latest --server "$ADDR" --token "$PULL" --store "$T/other"
[ "$(tail -n 1 "$T/out")" = "$REMOTE" ] || fail "pulled $(tail -n 1 "$T/out"), built $REMOTE"
expect_ok "$STRATA" build --store "$T/local" "$W/ok.yaml"
grep -q "^ok:latest $REMOTE\$" "$T/out" || fail "a local build differs: $(cat "$T/out") vs $REMOTE"
expect_ok "$STRATA" export --store "$T/other" ok:latest "$T/exported"
[ "$(cat "$T/exported/copy")" = "hello from the client" ] || fail "wrong content in the image"

# identical submission: the same build, nothing rebuilt
expect_ok submit "$W/ok.yaml"
[ "$(build_id)" = "$ID" ] || fail "resubmission got another build"
grep -q 'an identical build exists' "$T/out" || fail "resubmission not reported as existing"
grep -q "0 of .* chunks sent" "$T/err" || fail "context uploaded again: $(cat "$T/err")"
expect_ok show "$ID"
grep -q '^state     succeeded' "$T/out" || fail "Get: $(cat "$T/out")"

# a failing run step: exit 1, the failure and the output in the stream
expect_fail 1 "build sha256:[0-9a-f]+ failed: .*exited with status 3" submit "$W/fails.yaml"
grep -q 'about to fail' "$T/err" || fail "the failing step's output is missing"
grep -q 'failed: ' "$T/out" || fail "the failed layer is not shown"

# an invalid recipe: exit 2 with FILE:LINE:COL, nothing submitted
run submit "$W/bad.yaml"
[ "$rc" -eq 2 ] || fail "invalid recipe: exit $rc"
grep -q 'bad.yaml:4:5:' "$T/err" || fail "no FILE:LINE:COL: $(cat "$T/err")"

# a pull token cannot submit
expect_fail 1 "permission denied" "$STRATA" submit --server "$ADDR" --token "$PULL" \
  --store "$T/client" "$W/ok.yaml"

# the client goes away: the build goes on
submit "$W/slow.yaml" >"$T/slow.out" 2>"$T/slow.err" &
CLIENT=$!
wait_until 120 grep -q started "$T/slow.err" || fail "slow build did not start"
kill -9 "$CLIENT"
wait "$CLIENT" 2>/dev/null || true
SLOW=$(sed -n 's/^build \(sha256:[0-9a-f]*\).*/\1/p' "$T/slow.out")
[ -n "$SLOW" ] || fail "no id for the slow build"
wait_state "$SLOW" succeeded || fail "the build did not finish without its client"

# cancel a running build: the submitting client ends with exit 1
submit "$W/hang2.yaml" >"$T/hang2.out" 2>"$T/hang2.err" &
CLIENT=$!
wait_until 120 grep -q started2 "$T/hang2.err" || fail "hang2 did not start"
HANG2=$(sed -n 's/^build \(sha256:[0-9a-f]*\).*/\1/p' "$T/hang2.out")
expect_ok "$STRATA" cancel "$HANG2" --server "$ADDR" --token "$BUILD"
crc=0
wait "$CLIENT" || crc=$?
[ "$crc" -eq 1 ] || fail "cancelled build: client exit $crc"
grep -q "cancelled" "$T/hang2.err" || fail "cancel not reported: $(cat "$T/hang2.err")"

# the server dies mid-build: after the restart the build is failed, not running
expect_ok submit --detach "$W/hang.yaml"
HANG=$(build_id)
wait_state "$HANG" running || fail "hang build did not start"
kill -9 "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=
start_server
expect_ok show "$HANG"
grep -q '^state     failed' "$T/out" || fail "after restart: $(cat "$T/out")"
grep -q 'interrupted by server restart' "$T/out" || fail "no reason: $(cat "$T/out")"
expect_ok show
grep -q 'succeeded' "$T/out" || fail "List lost the earlier builds"
stop_server
grep -q 'strata serve: stopped' "$T/serve.log" || fail "no clean stop: $(tail -5 "$T/serve.log")"
echo "PASS"
