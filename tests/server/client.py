# SPDX-License-Identifier: Apache-2.0
"""An independent client of `strata serve`: Debian's python3-grpcio with stubs
generated from proto/strata.proto and proto/format.proto at test time. Calls
every RPC of Capabilities, Cas, Images and Status, including auth failures
and bad input, and builds an image from scratch (chunks, layer index,
manifest, tag) that the shell test then pulls with `strata pull`.

usage: client.py STUBS_DIR ADDR PULL_TOKEN PUSH_TOKEN WORKDIR [BUILD_TOKEN]

With BUILD_TOKEN it also calls every RPC of Builds: a recipe that reads no
file is submitted, resubmitted, watched, got, listed and cancelled, and bad
submissions and roles fail with the right status.
"""
import hashlib
import os
import subprocess
import sys

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
import format_pb2 as fmt  # noqa: E402
import strata_pb2 as pb  # noqa: E402
import strata_pb2_grpc as rpc  # noqa: E402

ADDR, PULL, PUSH, WORK = sys.argv[2:6]
BUILD = sys.argv[6] if len(sys.argv) > 6 else None
CHECKS = 0


def check(cond, what):
    global CHECKS
    CHECKS += 1
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


def md(token):
    return [("authorization", "Bearer " + token)] if token else []


def expect_code(code, fn, what, needle=None):
    try:
        fn()
    except grpc.RpcError as e:
        check(e.code() == code, "%s: got %s (%s), want %s" % (what, e.code(), e.details(), code))
        if needle:
            check(needle in e.details(), "%s: details %r lack %r" % (what, e.details(), needle))
        return
    check(False, "%s: succeeded, want %s" % (what, code))


def zstd(data):
    path = os.path.join(WORK, "frame-in")
    with open(path, "wb") as f:
        f.write(data)
    # from a file, so that the frame records its content size
    return subprocess.run(["zstd", "-q", "-c", path], check=True, stdout=subprocess.PIPE).stdout


def unzstd(frame):
    return subprocess.run(["zstd", "-q", "-d", "-c"], input=frame, check=True,
                          stdout=subprocess.PIPE).stdout


def sha(data):
    return hashlib.sha256(data).digest()


def pieces(kind, digest, frame, size=1 << 20):
    for off in range(0, len(frame), size):
        p = pb.BlobPiece(kind=kind, data=frame[off:off + size])
        if off == 0:
            p.digest = digest
            p.total = len(frame)
        yield p


def main():
    ch = grpc.insecure_channel(ADDR, options=[("grpc.max_send_message_length", 64 << 20),
                                              ("grpc.max_receive_message_length", 64 << 20)])
    caps = rpc.CapabilitiesStub(ch)
    cas = rpc.CasStub(ch)
    images = rpc.ImagesStub(ch)
    status = rpc.StatusStub(ch)

    # --- Capabilities and auth
    expect_code(grpc.StatusCode.UNAUTHENTICATED,
                lambda: caps.GetCapabilities(pb.GetCapabilitiesRequest()), "no token",
                "missing bearer token")
    expect_code(grpc.StatusCode.UNAUTHENTICATED,
                lambda: caps.GetCapabilities(pb.GetCapabilitiesRequest(), metadata=md("st_x")),
                "unknown token", "unknown bearer token")
    c = caps.GetCapabilities(pb.GetCapabilitiesRequest(), metadata=md(PULL))
    check(c.auth_required and "zstd" in c.compressors, "capabilities %s" % c)
    check(c.chunk_min <= c.chunk_avg <= c.chunk_max and c.max_message_bytes > 0, "limits")

    # --- Cas.Write: chunks of a file
    content = os.urandom(300000) + b"text " * 20000
    cuts = [0, 70000, 200000, 300000, len(content)]
    chunks = [content[a:b] for a, b in zip(cuts, cuts[1:])]
    digests = [sha(x) for x in chunks]
    frames = [zstd(x) for x in chunks]
    req = [pb.WriteRequest(frames=[pb.Frame(digest=d, data=f) for d, f in zip(digests, frames)])]
    expect_code(grpc.StatusCode.PERMISSION_DENIED,
                lambda: cas.Write(iter(req), metadata=md(PULL)), "Write with a pull token",
                "needs role push")
    missing = cas.FindMissing(pb.FindMissingRequest(kind=pb.OBJECT_KIND_CHUNK, digests=digests),
                              metadata=md(PULL)).missing
    check(list(missing) == digests, "FindMissing before Write")
    # the first two, then a broken stream, then all: the first two are acknowledged
    w = cas.Write(iter([pb.WriteRequest(frames=req[0].frames[:2])]), metadata=md(PUSH))
    check(w.stored == 2 and w.already_present == 0, "Write 2: %s" % w)
    w = cas.Write(iter(req), metadata=md(PUSH))
    check(w.stored == 2 and w.already_present == 2, "Write all: %s" % w)
    check(w.bytes_received == sum(len(f) for f in frames), "bytes_received")
    missing = cas.FindMissing(pb.FindMissingRequest(kind=pb.OBJECT_KIND_CHUNK, digests=digests),
                              metadata=md(PULL)).missing
    check(len(missing) == 0, "FindMissing after Write")
    bad = sha(b"not this")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: cas.Write(iter([pb.WriteRequest(frames=[pb.Frame(digest=bad,
                                                                         data=frames[0])])]),
                                  metadata=md(PUSH)),
                "digest mismatch", bad.hex())
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: cas.Write(iter([pb.WriteRequest(frames=[pb.Frame(digest=bad,
                                                                         data=b"junk")])]),
                                  metadata=md(PUSH)),
                "not a zstd frame", bad.hex())
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: cas.FindMissing(pb.FindMissingRequest(digests=[b"short"]),
                                        metadata=md(PULL)),
                "short digest", "digest #0")

    # --- Cas.Read: frames as stored, in order
    got = []
    for r in cas.Read(pb.ReadRequest(digests=digests), metadata=md(PULL)):
        got.extend(r.frames)
    check([f.digest for f in got] == digests, "Read order")
    check([unzstd(f.data) for f in got] == chunks, "Read content")
    unknown = sha(b"unknown")

    def read_unknown():
        for _ in cas.Read(pb.ReadRequest(digests=[digests[0], unknown]), metadata=md(PULL)):
            pass
    expect_code(grpc.StatusCode.NOT_FOUND, read_unknown, "Read unknown", unknown.hex())

    # --- PutBlob / GetBlob: a layer index and a manifest
    idx = fmt.LayerIndex(version=1, chunking=fmt.ChunkingParams(min=c.chunk_min, avg=c.chunk_avg,
                                                                 max=c.chunk_max))
    idx.entries.add(path=b"", type=fmt.ENTRY_TYPE_DIRECTORY, mode=0o755)
    idx.entries.add(path=b"data", type=fmt.ENTRY_TYPE_DIRECTORY, mode=0o755)
    f = idx.entries.add(path=b"data/file", type=fmt.ENTRY_TYPE_REGULAR, mode=0o644,
                        size=len(content))
    for d, x in zip(digests, chunks):
        f.chunks.add(digest=d, size=len(x))
    idx_bytes = idx.SerializeToString()
    layer = sha(idx_bytes)
    # an index naming a chunk the server lacks
    idx2 = fmt.LayerIndex()
    idx2.CopyFrom(idx)
    idx2.entries[2].chunks[0].digest = unknown
    idx2_bytes = idx2.SerializeToString()
    expect_code(grpc.StatusCode.NOT_FOUND,
                lambda: cas.PutBlob(pieces(pb.OBJECT_KIND_INDEX, sha(idx2_bytes),
                                           zstd(idx2_bytes)), metadata=md(PUSH)),
                "index with a missing chunk", unknown.hex())
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: cas.PutBlob(pieces(pb.OBJECT_KIND_INDEX, bad, zstd(idx_bytes)),
                                    metadata=md(PUSH)),
                "index digest mismatch", bad.hex())
    expect_code(grpc.StatusCode.PERMISSION_DENIED,
                lambda: cas.PutBlob(pieces(pb.OBJECT_KIND_INDEX, layer, zstd(idx_bytes)),
                                    metadata=md(PULL)), "PutBlob with a pull token")
    r = cas.PutBlob(pieces(pb.OBJECT_KIND_INDEX, layer, zstd(idx_bytes), size=100),
                    metadata=md(PUSH))
    check(not r.already_present, "PutBlob index")
    r = cas.PutBlob(pieces(pb.OBJECT_KIND_INDEX, layer, zstd(idx_bytes)), metadata=md(PUSH))
    check(r.already_present, "PutBlob index again")
    man = fmt.ImageManifest(version=1)
    man.layers.add(digest=layer, name="base", size=len(content))
    man.config.env.add(key="PATH", value="/usr/bin:/bin")
    man_bytes = man.SerializeToString()
    image = sha(man_bytes)
    cas.PutBlob(pieces(pb.OBJECT_KIND_MANIFEST, image, zstd(man_bytes)), metadata=md(PUSH))
    blob = b"".join(p.data for p in cas.GetBlob(pb.GetBlobRequest(kind=pb.OBJECT_KIND_MANIFEST,
                                                                  digest=image),
                                                metadata=md(PULL)))
    check(unzstd(blob) == man_bytes, "GetBlob manifest")

    def get_unknown_blob():
        for _ in cas.GetBlob(pb.GetBlobRequest(kind=pb.OBJECT_KIND_INDEX, digest=unknown),
                             metadata=md(PULL)):
            pass
    expect_code(grpc.StatusCode.NOT_FOUND, get_unknown_blob, "GetBlob unknown", unknown.hex())

    # --- oversize message: RESOURCE_EXHAUSTED, the server stays up
    expect_code(grpc.StatusCode.RESOURCE_EXHAUSTED,
                lambda: cas.PutBlob(iter([pb.BlobPiece(kind=pb.OBJECT_KIND_INDEX, digest=layer,
                                                       total=8 << 20,
                                                       data=b"\0" * (c.max_message_bytes + 1))]),
                                    metadata=md(PUSH)),
                "oversize message")

    # --- Images
    expect_code(grpc.StatusCode.PERMISSION_DENIED,
                lambda: images.Tag(pb.TagRequest(name="py", tag="v1", digest=image),
                                   metadata=md(PULL)), "Tag with a pull token")
    expect_code(grpc.StatusCode.NOT_FOUND,
                lambda: images.Tag(pb.TagRequest(name="py", tag="v1", digest=unknown),
                                   metadata=md(PUSH)), "Tag of an unknown image", unknown.hex())
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: images.Tag(pb.TagRequest(name="Bad Name", tag="v1", digest=image),
                                   metadata=md(PUSH)), "Tag with a bad name")
    images.Tag(pb.TagRequest(name="py", tag="v1", digest=image), metadata=md(PUSH))
    check(images.Resolve(pb.ResolveRequest(ref="py:v1"), metadata=md(PULL)).digest == image,
          "Resolve")
    check(images.Resolve(pb.ResolveRequest(ref="sha256:" + image.hex()),
                         metadata=md(PULL)).digest == image, "Resolve digest")
    expect_code(grpc.StatusCode.NOT_FOUND,
                lambda: images.Resolve(pb.ResolveRequest(ref="py:none"), metadata=md(PULL)),
                "Resolve unknown", "py:none")
    blobs, cur = [], None
    for r in images.Get(pb.GetImageRequest(digest=image), metadata=md(PULL)):
        if r.piece.digest:
            cur = [r.piece.kind, r.piece.digest, b""]
            blobs.append(cur)
        cur[2] += r.piece.data
    check([(k, d) for k, d, _ in blobs] == [(pb.OBJECT_KIND_MANIFEST, image),
                                            (pb.OBJECT_KIND_INDEX, layer)], "Get order")
    check(unzstd(blobs[1][2]) == idx_bytes, "Get index content")
    tags = images.List(pb.ListImagesRequest(), metadata=md(PULL)).images
    check(any(t.name == "py" and t.tag == "v1" and t.digest == image for t in tags), "List")
    m = images.Missing(pb.MissingRequest(digest=image, have_chunks=[digests[0]]),
                       metadata=md(PULL))
    check(list(m.layers) == [layer] and list(m.chunks) == digests[1:], "Missing: %s" % m)
    check(m.chunk_bytes == sum(len(x) for x in chunks[1:]), "Missing bytes")
    m = images.Missing(pb.MissingRequest(digest=image, have_layers=[layer]), metadata=md(PULL))
    check(len(m.layers) == 0 and len(m.chunks) == 0, "Missing with the layer")

    # --- Status
    s = status.Get(pb.StatusRequest(), metadata=md(PULL))
    metrics = {x.name: x.value for x in s.metrics}
    check(metrics.get("calls", 0) > 10 and metrics.get("chunks_received") == 4, "Status %s" % s.text)
    check(metrics.get("chunks_served", 0) >= 4 and "bytes_in " in s.text, "Status text")

    # --- a method nobody serves
    expect_code(grpc.StatusCode.UNIMPLEMENTED,
                lambda: ch.unary_unary("/strata.v1.Nothing/Here")(b"", metadata=md(PULL)),
                "unknown method")

    if BUILD:
        check_builds(ch)

    with open(os.path.join(WORK, "py-image"), "w") as f:
        f.write("sha256:" + image.hex() + "\n")
    with open(os.path.join(WORK, "py-content"), "wb") as f:
        f.write(content)
    print("python client: %d checks passed" % CHECKS)


def check_builds(ch):
    builds = rpc.BuildsStub(ch)
    text = "image: pyb\ntag: v1\nlayers:\n  - name: gone\n    delete: [/gone]\n"
    req = pb.SubmitRequest(recipe=text, recipe_name="py/r.yaml")
    for tok, what in ((PULL, "pull"), (PUSH, "push")):
        expect_code(grpc.StatusCode.PERMISSION_DENIED,
                    lambda: builds.Submit(req, metadata=md(tok)), "Submit with a %s token" % what)
    expect_code(grpc.StatusCode.UNAUTHENTICATED, lambda: builds.Submit(req), "Submit, no token")
    bad = pb.SubmitRequest(recipe="image: pyb\nlayers:\n  - name: l\n    bogus: 1\n",
                           recipe_name="py/r.yaml")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: builds.Submit(bad, metadata=md(BUILD)), "Submit invalid", "py/r.yaml:4:5:")
    wrong = pb.SubmitRequest(recipe=text, recipe_name="py/r.yaml",
                             inputs=[pb.BuildInput(name="x", kind=pb.OBJECT_KIND_CHUNK,
                                                   digest=b"\0" * 32)])
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: builds.Submit(wrong, metadata=md(BUILD)), "Submit other input", "context")
    gone = pb.SubmitRequest(recipe=text, recipe_name="py/r.yaml",
                            inputs=[pb.BuildInput(name="context", kind=pb.OBJECT_KIND_INDEX,
                                                  digest=b"\1" * 32)])
    expect_code(grpc.StatusCode.NOT_FOUND,
                lambda: builds.Submit(gone, metadata=md(BUILD)), "Submit unknown context")
    r = builds.Submit(req, metadata=md(BUILD))
    check(r.build_id.startswith("sha256:") and not r.existing, "Submit: %s" % r)
    again = builds.Submit(req, metadata=md(BUILD))
    check(again.build_id == r.build_id and again.existing, "Submit again: %s" % again)
    events = list(builds.Watch(pb.WatchRequest(build_id=r.build_id), metadata=md(PULL)))
    check(events[0].WhichOneof("event") == "build", "Watch starts with the state")
    last = events[-1].build
    check(last.state == pb.BUILD_STATE_SUCCEEDED, "Watch ends with success: %s" % last)
    check([(i.name, i.tag) for i in last.images] == [("pyb", "v1")], "images: %s" % last)
    layers = [e.layer for e in events if e.WhichOneof("event") == "layer"]
    check(any(x.layer == "gone" and x.state in (pb.LAYER_STATE_DONE, pb.LAYER_STATE_CACHED)
              and len(x.digest) == 32 for x in layers), "Watch layers: %s" % layers)
    info = builds.Get(pb.GetBuildRequest(build_id=r.build_id), metadata=md(PULL))
    check(info.state == pb.BUILD_STATE_SUCCEEDED and info.recipe_name == "py/r.yaml" and
          len(info.layers) == 1 and info.finished_unix >= info.submitted_unix > 0, "Get: %s" % info)
    listed = builds.List(pb.ListBuildsRequest(), metadata=md(PULL)).builds
    check(any(b.build_id == r.build_id for b in listed), "List")
    none = builds.List(pb.ListBuildsRequest(state=pb.BUILD_STATE_RUNNING), metadata=md(PULL))
    check(all(b.state == pb.BUILD_STATE_RUNNING for b in none.builds), "List by state")
    expect_code(grpc.StatusCode.PERMISSION_DENIED,
                lambda: builds.Cancel(pb.CancelBuildRequest(build_id=r.build_id),
                                      metadata=md(PULL)), "Cancel with a pull token")
    c = builds.Cancel(pb.CancelBuildRequest(build_id=r.build_id), metadata=md(BUILD))
    check(c.state == pb.BUILD_STATE_SUCCEEDED, "Cancel of a finished build changes nothing")
    expect_code(grpc.StatusCode.NOT_FOUND,
                lambda: builds.Get(pb.GetBuildRequest(build_id="sha256:" + "0" * 64),
                                   metadata=md(PULL)), "Get unknown build")
    expect_code(grpc.StatusCode.INVALID_ARGUMENT,
                lambda: builds.Get(pb.GetBuildRequest(build_id="nope"), metadata=md(PULL)),
                "Get malformed id")


main()
