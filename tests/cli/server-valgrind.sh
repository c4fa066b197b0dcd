#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# `strata serve` under valgrind memcheck (with tests/server/grpc.supp for
# gRPC's own globals): push, pull, auth failures, an unknown image, random
# bytes to the port, a client killed mid-stream, a build submitted and
# followed, then SIGTERM: no invalid
# access and no definite leak of ours (threads gRPC leaves running at exit
# show as "possibly lost" and are not counted). The push and pull clients
# run under valgrind too.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote-lib.sh"
command -v valgrind >/dev/null || skip "valgrind is not installed"
[ -z "${STRATA_SANITIZED:-}" ] || skip "sanitizer build"

SUPP=$SRCDIR/tests/server/grpc.supp
VG=(valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
  --show-leak-kinds=definite --track-fds=no --suppressions="$SUPP"
  --trace-children=yes --trace-children-skip='/usr/*,/bin/*,/sbin/*')

A=$T/a
make_image "$A" "$T/img" demo:v1 3
expect_ok "$STRATA" token add "$T/tokens" ci push
TOK=$(cat "$T/out")
expect_ok "$STRATA" token add "$T/tokens" builder build
TOKB=$(cat "$T/out")
mkdir -p "$T/ctx/in"
echo "built under valgrind" >"$T/ctx/in/f"
printf 'image: vg\nlayers:\n  - name: l\n    sources:\n      - file: ./in/f\n' >"$T/ctx/r.yaml"
printf 'image: vg\nlayers:\n  - name: l\n    bogus: 1\n' >"$T/ctx/bad.yaml"

"${VG[@]}" --log-file="$T/vg-server.log" "$STRATA" --store "$T/srv" serve --listen 127.0.0.1:0 \
  --tokens "$T/tokens" --workers 3 >"$T/s.log" 2>&1 &
spid=$!
on_exit "kill -9 $spid 2>/dev/null || true"
wait_until 120 grep -q 'listening on' "$T/s.log" || { cat "$T/s.log" >&2; fail "server did not start"; }
ADDR=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$T/s.log")

vgc() { # EXPECTED-EXIT ARGS...: the client under valgrind too
  local want=$1
  shift
  rc=0
  "${VG[@]}" --log-file="$T/vg-client.log" "$STRATA" "$@" >"$T/out" 2>"$T/err" || rc=$?
  if [ "$rc" -eq 99 ] || [ -s "$T/vg-client.log" ]; then
    cat "$T/vg-client.log" >&2
    fail "valgrind reports errors for: strata $*"
  fi
  [ "$rc" -eq "$want" ] || fail "strata $*: exit $rc under valgrind, want $want: $(cat "$T/err")"
}

vgc 0 --store "$A" push demo:v1 --server "$ADDR" --token "$TOK" --streams 2
vgc 0 --store "$T/b" pull demo:v1 --server "$ADDR" --token "$TOK" --streams 2
vgc 1 --store "$T/b" pull demo:v1 --server "$ADDR"
vgc 1 --store "$T/b" pull demo:none --server "$ADDR" --token "$TOK"
vgc 1 --store "$T/b" pull demo:v1 --server 127.0.0.1:1 --deadline 5
(exec 3<>"/dev/tcp/127.0.0.1/${ADDR##*:}" && head -c 50000 /dev/urandom >&3 && sleep 0.2) 2>/dev/null || true
# a client killed mid-stream
make_image "$A" "$T/big" demo:big 24
"$STRATA" --store "$A" push demo:big --server "$ADDR" --token "$TOK" --streams 1 >/dev/null 2>&1 &
ppid=$!
wait_until 120 bash -c "[ -n \"\$(find '$T/srv/tmp' -type f 2>/dev/null | head -n 1)\" ]" || true
kill -9 "$ppid" 2>/dev/null || true
wait "$ppid" 2>/dev/null || true
vgc 0 --store "$A" push demo:big --server "$ADDR" --token "$TOK"
# a build: context upload, Submit, Watch to the end; an invalid recipe; Get and List
vgc 0 --store "$T/c" submit "$T/ctx/r.yaml" --server "$ADDR" --token "$TOKB"
grep -q '^vg:latest sha256:' "$T/out" || fail "no image from the build: $(cat "$T/out")"
BID=$(sed -n 's/^build \(sha256:[0-9a-f]*\).*/\1/p' "$T/out")
vgc 2 --store "$T/c" submit "$T/ctx/bad.yaml" --server "$ADDR" --token "$TOKB"
vgc 0 builds "$BID" --server "$ADDR" --token "$TOKB"
vgc 0 builds --server "$ADDR" --token "$TOKB"
kill -TERM "$spid"
src=0
wait "$spid" || src=$?
if [ "$src" -ne 0 ] || [ -s "$T/vg-server.log" ]; then
  cat "$T/vg-server.log" >&2
  tail -n 5 "$T/s.log" >&2
  fail "valgrind reports errors for the server (exit $src)"
fi
grep -q 'strata serve: stopped' "$T/s.log" || fail "server did not stop cleanly"
expect_ok "$STRATA" --store "$T/srv" store fsck
echo PASS
