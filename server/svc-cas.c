/* SPDX-License-Identifier: Apache-2.0 */
/* The Cas service: FindMissing, Read (stored zstd frames sent as they are),
 * Write (client stream; each frame decompressed and verified before it is
 * stored; what was verified is flushed even when the client goes away, so a
 * retry only sends what FindMissing still reports), GetBlob and PutBlob for
 * layer indexes and manifests (checked to decode and to reference only
 * objects present). */
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "codec.h"
#include "image.h"
#include "layer-index.h"
#include "svc-private.h"

ST_DEFINE_FREEP(st_codec, st_codec_free)

int svc_digest(st_digest *out, const ProtobufCBinaryData *b, const char *what, st_error *err) {
  if (b->len != ST_DIGEST_LEN)
    return st_error_set(err, ST_EINVAL, "%s has %zu bytes, want a 32-byte SHA-256", what, b->len);
  memcpy(out->bytes, b->data, ST_DIGEST_LEN);
  return ST_OK;
}

int svc_kind(st_kind *out, int kind, st_error *err) {
  if (kind < 0 || kind >= ST_KIND_COUNT)
    return st_error_set(err, ST_EINVAL, "unknown object kind %d", kind);
  *out = (st_kind)kind;
  return ST_OK;
}

static int not_found(st_error *err, st_kind k, const st_digest *d) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  return st_error_set(err, ST_ENOENT, "%s sha256:%s not found", st_kind_name(k),
                      st_digest_hex(d, hex));
}

/* Receives exactly one request message (unary calls). */
static int recv_one(st_rpc_call *c, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                    st_error *err) {
  int r = st_rpc_recv(c, desc, out, err);
  if (r == 0)
    return st_error_set(err, ST_EINVAL, "missing %s", desc->name);
  return r < 0 ? r : ST_OK;
}

static int find_missing(st_rpc_call *c, void *ud, st_error *err) {
  Strata__V1__FindMissingRequest *req;
  int r = recv_one(c, &strata__v1__find_missing_request__descriptor, (ProtobufCMessage **)&req,
                   err);
  if (r < 0)
    return r;
  st_server *srv = st_rpc_server(c);
  st_kind k;
  _cleanup_free_ ProtobufCBinaryData *missing = calloc(req->n_digests + 1, sizeof *missing);
  size_t n_missing = 0;
  if ((r = svc_kind(&k, req->kind, err)) < 0)
    goto out;
  if (!missing) {
    r = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  if (req->n_digests > SVC_BATCH_DIGESTS) {
    r = st_error_set(err, ST_ELIMIT, "%zu digests in one FindMissing, at most %u",
                     req->n_digests, SVC_BATCH_DIGESTS);
    goto out;
  }
  for (size_t i = 0; i < req->n_digests; i++) {
    st_digest d;
    char what[32];
    snprintf(what, sizeof what, "digest #%zu", i);
    if ((r = svc_digest(&d, &req->digests[i], what, err)) < 0)
      goto out;
    if ((r = st_store_has(st_server_store(srv), k, &d, err)) < 0)
      goto out;
    if (r == 0)
      missing[n_missing++] = req->digests[i];
  }
  st_server_count(srv, "find_missing_present", req->n_digests - n_missing);
  st_server_count(srv, "find_missing_absent", n_missing);
  Strata__V1__FindMissingResponse resp = STRATA__V1__FIND_MISSING_RESPONSE__INIT;
  resp.n_missing = n_missing;
  resp.missing = missing;
  r = st_rpc_send(c, &resp.base, err);
out:
  protobuf_c_message_free_unpacked(&req->base, NULL);
  return r;
}

/* Sends the frames collected so far and frees them. */
static int flush_frames(st_rpc_call *c, Strata__V1__Frame *frames, Strata__V1__Frame **ptrs,
                        size_t *n, st_error *err) {
  if (*n == 0)
    return ST_OK;
  Strata__V1__ReadResponse resp = STRATA__V1__READ_RESPONSE__INIT;
  resp.n_frames = *n;
  resp.frames = ptrs;
  int r = st_rpc_send(c, &resp.base, err);
  for (size_t i = 0; i < *n; i++)
    free(frames[i].data.data);
  *n = 0;
  return r;
}

static int cas_read(st_rpc_call *c, void *ud, st_error *err) {
  Strata__V1__ReadRequest *req;
  int r = recv_one(c, &strata__v1__read_request__descriptor, (ProtobufCMessage **)&req, err);
  if (r < 0)
    return r;
  st_server *srv = st_rpc_server(c);
  st_store *store = st_server_store(srv);
  size_t cap = req->n_digests ? req->n_digests : 1;
  _cleanup_free_ Strata__V1__Frame *frames = calloc(cap, sizeof *frames);
  _cleanup_free_ Strata__V1__Frame **ptrs = calloc(cap, sizeof *ptrs);
  size_t n = 0, bytes = 0;
  uint64_t served = 0;
  if (!frames || !ptrs) {
    r = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  if (req->n_digests > SVC_BATCH_DIGESTS) {
    r = st_error_set(err, ST_ELIMIT, "%zu digests in one Read, at most %u", req->n_digests,
                     SVC_BATCH_DIGESTS);
    goto out;
  }
  for (size_t i = 0; i < req->n_digests && r >= 0; i++) {
    st_digest d;
    char what[32];
    snprintf(what, sizeof what, "digest #%zu", i);
    if ((r = svc_digest(&d, &req->digests[i], what, err)) < 0)
      break;
    uint8_t *frame;
    size_t flen;
    r = st_store_get_frame(store, ST_KIND_CHUNK, &d, &frame, &flen, err);
    if (r == ST_ENOENT) {
      st_server_count(srv, "chunks_not_found", 1);
      r = not_found(err, ST_KIND_CHUNK, &d);
    }
    if (r < 0)
      break;
    strata__v1__frame__init(&frames[n]);
    frames[n].digest = req->digests[i];
    frames[n].data.data = frame;
    frames[n].data.len = flen;
    ptrs[n] = &frames[n];
    n++;
    bytes += flen;
    served++;
    if (bytes >= SVC_BATCH_BYTES) {
      r = flush_frames(c, frames, ptrs, &n, err);
      bytes = 0;
    }
  }
  if (r >= 0)
    r = flush_frames(c, frames, ptrs, &n, err);
  st_server_count(srv, "chunks_served", served);
out:
  for (size_t i = 0; i < n; i++)
    free(frames[i].data.data);
  protobuf_c_message_free_unpacked(&req->base, NULL);
  return r < 0 ? r : ST_OK;
}

static int write_frame(st_server *srv, const Strata__V1__Frame *f, Strata__V1__WriteResponse *resp,
                       st_error *err) {
  st_store *store = st_server_store(srv);
  st_digest d;
  int r = svc_digest(&d, &f->digest, "frame digest", err);
  if (r < 0)
    return r;
  resp->bytes_received += f->data.len;
  if ((r = st_store_has(store, ST_KIND_CHUNK, &d, err)) < 0)
    return r;
  if (r == 1) {
    resp->already_present++;
    return ST_OK;
  }
  r = st_store_put_frame(store, ST_KIND_CHUNK, &d, f->data.data, f->data.len, err);
  if (r == ST_ECORRUPT) {
    char hex[ST_DIGEST_HEX_LEN + 1];
    return st_error_set(err, ST_EINVAL, "chunk sha256:%s: %s", st_digest_hex(&d, hex), err->msg);
  }
  if (r < 0)
    return r;
  resp->stored++;
  return ST_OK;
}

static int cas_write(st_rpc_call *c, void *ud, st_error *err) {
  st_server *srv = st_rpc_server(c);
  Strata__V1__WriteResponse resp = STRATA__V1__WRITE_RESPONSE__INIT;
  int r;
  for (;;) {
    Strata__V1__WriteRequest *req;
    r = st_rpc_recv(c, &strata__v1__write_request__descriptor, (ProtobufCMessage **)&req, err);
    if (r <= 0)
      break;
    for (size_t i = 0; i < req->n_frames && r >= 0; i++)
      r = write_frame(srv, req->frames[i], &resp, err);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (r < 0)
      break;
  }
  /* Verified chunks are kept whatever happened to the stream. */
  st_error ferr = {0};
  int fr = st_store_flush(st_server_store(srv), &ferr);
  st_server_count(srv, "chunks_received", resp.stored);
  st_server_count(srv, "chunks_already_present", resp.already_present);
  if (r < 0)
    return r;
  if (fr < 0) {
    *err = ferr;
    return fr;
  }
  return st_rpc_send(c, &resp.base, err);
}

int svc_send_blob(st_rpc_call *c, st_kind k, const st_digest *d, bool as_image, st_error *err) {
  _cleanup_free_ uint8_t *frame = NULL;
  size_t flen;
  int r = st_store_get_frame(st_server_store(st_rpc_server(c)), k, d, &frame, &flen, err);
  if (r == ST_ENOENT)
    return not_found(err, k, d);
  if (r < 0)
    return r;
  size_t off = 0;
  do {
    size_t n = flen - off < SVC_BATCH_BYTES ? flen - off : SVC_BATCH_BYTES;
    Strata__V1__BlobPiece piece = STRATA__V1__BLOB_PIECE__INIT;
    piece.kind = (Strata__V1__ObjectKind)k;
    if (off == 0) {
      piece.digest.data = (uint8_t *)d->bytes;
      piece.digest.len = ST_DIGEST_LEN;
      piece.total = flen;
    }
    piece.data.data = frame + off;
    piece.data.len = n;
    if (as_image) {
      Strata__V1__GetImageResponse resp = STRATA__V1__GET_IMAGE_RESPONSE__INIT;
      resp.piece = &piece;
      r = st_rpc_send(c, &resp.base, err);
    } else
      r = st_rpc_send(c, &piece.base, err);
    off += n;
  } while (r == ST_OK && off < flen);
  return r;
}

static int get_blob(st_rpc_call *c, void *ud, st_error *err) {
  Strata__V1__GetBlobRequest *req;
  int r = recv_one(c, &strata__v1__get_blob_request__descriptor, (ProtobufCMessage **)&req, err);
  if (r < 0)
    return r;
  st_kind k;
  st_digest d;
  if ((r = svc_kind(&k, req->kind, err)) == ST_OK && (r = svc_digest(&d, &req->digest, "digest", err)) == ST_OK)
    r = svc_send_blob(c, k, &d, false, err);
  protobuf_c_message_free_unpacked(&req->base, NULL);
  return r;
}

/* Every object a decoded index or manifest references must be present. */
static int check_refs(st_store *s, st_kind k, const uint8_t *data, size_t len, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  int r;
  if (k == ST_KIND_INDEX) {
    _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
    if ((r = st_layer_index_decode(&idx, data, len, err)) < 0)
      return r;
    for (size_t i = 0; i < st_layer_index_count(idx); i++) {
      const st_entry *e = st_layer_index_entry(idx, i);
      for (size_t j = 0; j < e->n_chunks; j++) {
        if ((r = st_store_has(s, ST_KIND_CHUNK, &e->chunks[j].digest, err)) < 0)
          return r;
        if (r == 0)
          return st_error_set(err, ST_ENOENT, "chunk sha256:%s of /%s is not on the server",
                              st_digest_hex(&e->chunks[j].digest, hex), e->path);
      }
    }
  } else if (k == ST_KIND_MANIFEST) {
    _cleanup_(st_image_freep) st_image *img = NULL;
    if ((r = st_image_decode(&img, data, len, err)) < 0)
      return r;
    for (size_t i = 0; i < img->n_layers; i++) {
      if ((r = st_store_has(s, ST_KIND_INDEX, &img->layers[i].digest, err)) < 0)
        return r;
      if (r == 0)
        return st_error_set(err, ST_ENOENT, "layer sha256:%s is not on the server",
                            st_digest_hex(&img->layers[i].digest, hex));
    }
  }
  return ST_OK;
}

/* Collects the pieces of one blob into *frame. */
static int recv_blob(st_rpc_call *c, st_kind *k, st_digest *d, uint8_t **frame, size_t *flen,
                     st_error *err) {
  size_t total = 0, have = 0;
  bool first = true;
  for (;;) {
    Strata__V1__BlobPiece *p;
    int r = st_rpc_recv(c, &strata__v1__blob_piece__descriptor, (ProtobufCMessage **)&p, err);
    if (r < 0)
      return r;
    if (r == 0)
      break;
    r = ST_OK;
    if (first) {
      first = false;
      if ((r = svc_kind(k, p->kind, err)) == ST_OK && *k == ST_KIND_CHUNK)
        r = st_error_set(err, ST_EINVAL, "PutBlob takes indexes and manifests; chunks go "
                                         "through Cas.Write");
      if (r == ST_OK)
        r = svc_digest(d, &p->digest, "blob digest", err);
      if (r == ST_OK && (p->total == 0 || p->total > ST_STORE_BLOB_MAX))
        r = st_error_set(err, ST_ELIMIT, "blob of %llu bytes (at most %u)",
                         (unsigned long long)p->total, ST_STORE_BLOB_MAX);
      if (r == ST_OK && !(*frame = malloc(p->total)))
        r = st_error_set(err, ST_ENOMEM, "out of memory");
      total = p->total;
    }
    if (r == ST_OK && p->data.len > total - have)
      r = st_error_set(err, ST_EINVAL, "blob pieces exceed the announced %zu bytes", total);
    if (r == ST_OK) {
      memcpy(*frame + have, p->data.data, p->data.len);
      have += p->data.len;
    }
    protobuf_c_message_free_unpacked(&p->base, NULL);
    if (r < 0)
      return r;
  }
  if (first)
    return st_error_set(err, ST_EINVAL, "no blob pieces");
  if (have != total)
    return st_error_set(err, ST_EINVAL, "blob truncated: %zu of %zu bytes", have, total);
  *flen = total;
  return ST_OK;
}

static int put_blob(st_rpc_call *c, void *ud, st_error *err) {
  st_server *srv = st_rpc_server(c);
  st_store *store = st_server_store(srv);
  st_kind k = ST_KIND_INDEX;
  st_digest d;
  _cleanup_free_ uint8_t *frame = NULL;
  size_t flen = 0;
  int r = recv_blob(c, &k, &d, &frame, &flen, err);
  if (r < 0)
    return r;
  char hex[ST_DIGEST_HEX_LEN + 1];
  Strata__V1__PutBlobResponse resp = STRATA__V1__PUT_BLOB_RESPONSE__INIT;
  if ((r = st_store_has(store, k, &d, err)) < 0)
    return r;
  if (r == 1) {
    resp.already_present = true;
    return st_rpc_send(c, &resp.base, err);
  }
  _cleanup_(st_codec_freep) st_codec *codec = NULL;
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  if ((r = st_codec_new(&codec, 1, err)) < 0)
    return r;
  r = st_codec_decompress(codec, frame, flen, ST_STORE_BLOB_MAX, &data, &len, err);
  if (r == ST_ECORRUPT)
    return st_error_set(err, ST_EINVAL, "%s sha256:%s: %s", st_kind_name(k),
                        st_digest_hex(&d, hex), err->msg);
  if (r < 0)
    return r;
  st_digest got;
  st_sha256(&got, data, len);
  if (!st_digest_equal(&got, &d))
    return st_error_set(err, ST_EINVAL, "%s sha256:%s: content does not match its digest",
                        st_kind_name(k), st_digest_hex(&d, hex));
  if ((r = check_refs(store, k, data, len, err)) < 0) {
    if (r != ST_ENOENT)
      return st_error_prefix(err, "%s sha256:%s", st_kind_name(k), st_digest_hex(&d, hex));
    return r;
  }
  if ((r = st_store_put_hashed(store, k, &d, data, len, NULL, err)) < 0 ||
      (r = st_store_flush(store, err)) < 0)
    return r;
  st_server_count(srv, "blobs_received", 1);
  return st_rpc_send(c, &resp.base, err);
}

static const st_rpc_method methods[] = {
    {"/strata.v1.Cas/FindMissing", ST_ROLE_PULL, find_missing},
    {"/strata.v1.Cas/Read", ST_ROLE_PULL, cas_read},
    {"/strata.v1.Cas/Write", ST_ROLE_PUSH, cas_write},
    {"/strata.v1.Cas/GetBlob", ST_ROLE_PULL, get_blob},
    {"/strata.v1.Cas/PutBlob", ST_ROLE_PUSH, put_blob},
};

int st_svc_cas_register(st_server *srv, st_error *err) {
  return st_server_add_service(srv, "Cas", methods, ST_ARRAY_SIZE(methods), NULL, NULL, err);
}
