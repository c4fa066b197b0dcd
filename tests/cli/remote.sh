#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata serve / push / pull / token between stores over loopback: a pushed
# and pulled image exports byte-identical; a re-pull moves nothing; tokens
# (missing or unknown: authentication failed; read-only token pushing:
# permission denied); clear errors for an unreachable server, usage
# mistakes, an unknown image; random bytes sent to the port; a push killed
# in the middle of Cas.Write (server stays up, store passes fsck, the retry
# sends only the rest); 50 concurrent pulls of one image; SIGTERM stops the
# server cleanly.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote-lib.sh"

A=$T/a B=$T/b SRV=$T/srv
make_image "$A" "$T/img" demo:v1 4

# tokens: hashed at rest, printed once
expect_ok "$STRATA" token add "$T/tokens" ci push
TOK_PUSH=$(cat "$T/out")
expect_ok "$STRATA" token add "$T/tokens" reader pull
TOK_PULL=$(cat "$T/out")
[[ $TOK_PUSH =~ ^st_[0-9a-f]{64}$ ]] || fail "token format: $TOK_PUSH"
! grep -q "$TOK_PUSH" "$T/tokens" || fail "the tokens file holds a token in clear"
[ "$(stat -c %a "$T/tokens")" = 600 ] || fail "tokens file mode"
expect_fail 1 "exists already" "$STRATA" token add "$T/tokens" ci pull
expect_fail 2 "unknown role" "$STRATA" token add "$T/tokens" x root

serve_start s1 "$SRV" --tokens "$T/tokens"
ADDR=$s1_ADDR

# usage and auth errors
expect_fail 2 "server ADDR is required" "$STRATA" --store "$A" push demo:v1
expect_fail 2 "invalid --max-rate 'fast'" "$STRATA" --store "$A" pull demo:v1 --server 127.0.0.1:1 --max-rate fast
expect_fail 1 "authentication failed.*missing bearer token" "$STRATA" --store "$A" push demo:v1 --server "$ADDR"
expect_fail 1 "authentication failed.*unknown bearer token" "$STRATA" --store "$A" push demo:v1 --server "$ADDR" --token st_nope
expect_fail 1 "permission denied.*reader.*needs role push" "$STRATA" --store "$A" push demo:v1 --server "$ADDR" --token "$TOK_PULL"
expect_fail 1 "image nothing:here not found" "$STRATA" --store "$A" push nothing:here --server "$ADDR" --token "$TOK_PUSH"

# push, pull, byte-identical
expect_ok "$STRATA" --store "$A" push demo:v1 --server "$ADDR" --token "$TOK_PUSH"
D=$(tail -n 1 "$T/out")
[[ $D =~ $DIGEST_RE ]] || fail "push printed no digest"
grep -q "pushed demo:v1 $D" "$T/err" || fail "push summary: $(cat "$T/err")"
STRATA_TOKEN=$TOK_PULL expect_ok "$STRATA" --store "$B" pull demo:v1 --server "$ADDR" --streams 3
[ "$(tail -n 1 "$T/out")" = "$D" ] || fail "pull digest differs"
expect_ok "$STRATA" --store "$B" store fsck
expect_ok "$STRATA" --store "$A" export demo:v1 "$T/exp-a"
expect_ok "$STRATA" --store "$B" export demo:v1 "$T/exp-b"
assert_same_tree "$T/exp-a" "$T/exp-b"
# again: nothing moves
STRATA_TOKEN=$TOK_PULL expect_ok "$STRATA" --store "$B" pull demo:v1 --server "$ADDR"
grep -Eq ': 0 of [0-9]+ chunks moved' "$T/err" || fail "re-pull moved chunks: $(cat "$T/err")"
STRATA_TOKEN=$TOK_PULL expect_fail 1 "image demo:none not found" "$STRATA" --store "$B" pull demo:none --server "$ADDR"
STRATA_TOKEN=$TOK_PULL expect_fail 2 "unexpected argument" "$STRATA" --store "$B" pull demo:v1 extra --server "$ADDR"
grep -q "access peer=.* who=reader method=/strata.v1.Images/Resolve status=0" "$T/s1.log" ||
  fail "no access log line"

# random bytes to the port: the server keeps serving
head -c 100000 /dev/urandom >"$T/noise"
(exec 3<>"/dev/tcp/127.0.0.1/${ADDR##*:}" && cat "$T/noise" >&3 && sleep 0.2) 2>/dev/null || true
printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' >"$T/http"
(exec 3<>"/dev/tcp/127.0.0.1/${ADDR##*:}" && cat "$T/http" >&3 && sleep 0.2) 2>/dev/null || true
STRATA_TOKEN=$TOK_PULL expect_ok "$STRATA" --store "$B" pull demo:v1 --server "$ADDR"

# a push killed in the middle of Cas.Write
make_image "$A" "$T/big" demo:big 48
"$STRATA" --store "$A" push demo:big --server "$ADDR" --token "$TOK_PUSH" --streams 1 \
  >"$T/killed.out" 2>&1 &
pushpid=$!
wait_until 60 bash -c "[ -n \"\$(find '$SRV/tmp' -type f 2>/dev/null | head -n 1)\" ]" ||
  fail "the push never staged a chunk"
kill -9 "$pushpid"
wait "$pushpid" 2>/dev/null || true
kill -0 "$s1_PID" || fail "server died with the killed client"
wait_until 30 grep -q 'method=/strata.v1.Cas/Write status=1' "$T/s1.log" ||
  fail "server did not end the killed Write: $(tail -n 3 "$T/s1.log")"
expect_ok "$STRATA" --store "$SRV" store fsck
expect_ok "$STRATA" --store "$A" push demo:big --server "$ADDR" --token "$TOK_PUSH"
moved=$(sed -n 's/.*: \([0-9]*\) of \([0-9]*\) chunks moved.*/\1/p' "$T/err")
total=$(sed -n 's/.*: \([0-9]*\) of \([0-9]*\) chunks moved.*/\2/p' "$T/err")
present=$(sed -n 's/.*, \([0-9]*\) already there.*/\1/p' "$T/err")
[ -n "$moved" ] && [ "$present" -gt 0 ] && [ "$moved" -lt "$total" ] ||
  fail "the retry resent stored chunks: $(cat "$T/err")"
[ $((moved + present)) -eq "$total" ] || fail "moved + present != total: $(cat "$T/err")"
expect_ok "$STRATA" --store "$SRV" store fsck
STRATA_TOKEN=$TOK_PULL expect_ok "$STRATA" --store "$T/c" pull demo:big --server "$ADDR"
expect_ok "$STRATA" --store "$T/c" store fsck

# 50 concurrent pulls of one image
pids=()
for i in $(seq 1 50); do
  STRATA_TOKEN=$TOK_PULL "$STRATA" --store "$T/many/$i" pull demo:v1 --server "$ADDR" --streams 2 \
    >"$T/many-$i.out" 2>"$T/many-$i.err" &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { cat "$T/many-$((i + 1)).err" >&2; fail "concurrent pull $((i + 1)) failed"; }
done
for i in $(seq 1 50); do
  [ "$(tail -n 1 "$T/many-$i.out")" = "$D" ] || fail "concurrent pull $i: wrong digest"
done
expect_ok "$STRATA" --store "$T/many/50" store fsck
echo "server peak RSS after 50 concurrent pulls: $(grep VmHWM "/proc/$s1_PID/status")"

serve_stop s1
# a stopped server: a clear error
expect_fail 1 "unavailable.*$ADDR" "$STRATA" --store "$B" pull demo:v1 --server "$ADDR" --deadline 5
echo PASS
