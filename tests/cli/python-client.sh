#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The independent Python client (tests/server/client.py: Debian's
# python3-grpcio, stubs generated here from proto/*.proto) calls every RPC of
# the server (Builds too), auth failures and bad input included; then `strata pull` of the
# image it built from scratch exports the file it uploaded, byte-identical;
# last, a server with --max-streams 1 holds a second call on one connection
# back while another connection is served (tests/server/stream_limit.py).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote-lib.sh"

PY=/usr/bin/python3
[ -x "$PY" ] && "$PY" -c 'import grpc, google.protobuf' 2>/dev/null ||
  skip "python3-grpcio / python3-protobuf are not installed"
command -v protoc >/dev/null && [ -x /usr/bin/grpc_python_plugin ] ||
  skip "protobuf-compiler / protobuf-compiler-grpc are not installed"
command -v zstd >/dev/null || skip "zstd is not installed"

mkdir -p "$T/stubs" "$T/work"
protoc --proto_path="$SRCDIR/proto" --python_out="$T/stubs" --grpc_out="$T/stubs" \
  --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin strata.proto format.proto ||
  fail "protoc could not generate the Python stubs"

expect_ok "$STRATA" token add "$T/tokens" reader pull
TOK_PULL=$(cat "$T/out")
expect_ok "$STRATA" token add "$T/tokens" ci push
TOK_PUSH=$(cat "$T/out")
expect_ok "$STRATA" token add "$T/tokens" builder build
TOK_BUILD=$(cat "$T/out")
serve_start s "$T/srv" --tokens "$T/tokens"

expect_ok "$PY" "$SRCDIR/tests/server/client.py" "$T/stubs" "$s_ADDR" "$TOK_PULL" "$TOK_PUSH" "$T/work" \
  "$TOK_BUILD"
cat "$T/out"
D=$(cat "$T/work/py-image")
STRATA_TOKEN=$TOK_PULL expect_ok "$STRATA" --store "$T/b" pull py:v1 --server "$s_ADDR"
[ "$(tail -n 1 "$T/out")" = "$D" ] || fail "pulled digest differs from the Python client's"
expect_ok "$STRATA" --store "$T/b" store fsck
expect_ok "$STRATA" --store "$T/b" export py:v1 "$T/root"
cmp "$T/root/data/file" "$T/work/py-content" || fail "exported file differs from the uploaded one"
expect_ok "$STRATA" --store "$T/srv" store fsck
serve_stop s

# The per-client stream limit (HTTP/2 MAX_CONCURRENT_STREAMS per connection).
serve_start l "$T/srv" --max-streams 1 --workers 2
expect_ok "$PY" "$SRCDIR/tests/server/stream_limit.py" "$T/stubs" "$l_ADDR"
serve_stop l
echo PASS
