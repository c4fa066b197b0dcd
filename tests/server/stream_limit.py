# SPDX-License-Identifier: Apache-2.0
"""The per-client stream limit of `strata serve --max-streams 1`, seen by an
independent client (Debian's python3-grpcio): while one channel holds a
Cas.Write stream open, a second call on the same channel (the same HTTP/2
connection) cannot start and runs into its deadline, while a call on another
channel is served; once the held stream ends, the first channel works again.

usage: stream_limit.py STUBS_DIR ADDR
"""
import sys
import threading

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
import strata_pb2 as pb  # noqa: E402
import strata_pb2_grpc as rpc  # noqa: E402

ADDR = sys.argv[2]


def fail(what):
    print("FAIL:", what, file=sys.stderr)
    sys.exit(1)


# Separate connections: without this option grpcio may share one subchannel.
opts = [("grpc.use_local_subchannel_pool", 1)]
a = grpc.insecure_channel(ADDR, options=opts)
b = grpc.insecure_channel(ADDR, options=opts)
cas_a, caps_a = rpc.CasStub(a), rpc.CapabilitiesStub(a)
caps_b = rpc.CapabilitiesStub(b)
caps_a.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=30)
caps_b.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=30)

release = threading.Event()
started = threading.Event()


def requests():
    started.set()
    release.wait()
    return
    yield  # a generator that sends nothing until released


held = cas_a.Write.future(requests(), timeout=120)
if not started.wait(30):
    fail("the held Cas.Write never asked for its first message")

try:
    caps_a.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=3)
    fail("a second stream on the same connection was served past --max-streams 1")
except grpc.RpcError as e:
    if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
        fail("second stream on the same connection: %s %s" % (e.code(), e.details()))

r = caps_b.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=30)
if not r.server_version:
    fail("another connection was not served while the first one was at its limit")

release.set()
resp = held.result(timeout=60)
if resp.stored != 0:
    fail("an empty Cas.Write stored %d chunks" % resp.stored)
caps_a.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=30)
print("stream limit: OK")
