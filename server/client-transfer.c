/* SPDX-License-Identifier: Apache-2.0 */
/* Pull and push (client.h): only the objects the receiving side lacks move,
 * chunks over parallel streams, and objects land in dependency order
 * (chunks, then indexes, then the manifest, then the tag). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client-private.h"
#include "codec.h"
#include "dset.h"
#include "fs.h"
#include "image.h"
#include "layer-index.h"
#include "rate.h"

#define BATCH_BYTES (1u << 20)
#define BATCH_DIGESTS 4096u
#define DEFAULT_STREAMS 4u

ST_DEFINE_FREEP(st_codec, st_codec_free)

typedef struct {
  st_chunk_ref *v;
  size_t n, cap;
} chunk_list;

static int chunk_list_add(chunk_list *l, const st_chunk_ref *ref) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 1024;
    st_chunk_ref *v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return ST_ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *ref;
  return ST_OK;
}

/* One image's objects: the manifest, its decoded layer indexes (with the
 * frames of the ones fetched), and the distinct chunks. */
typedef struct {
  st_digest digest;
  st_image *img;
  uint8_t *manifest_frame;
  size_t manifest_flen;
  st_layer_index **idx;   /* one per layer */
  uint8_t **idx_frame;    /* fetched frames, NULL for local ones */
  size_t *idx_flen;
  chunk_list chunks;      /* distinct */
} image_set;

static void image_set_clear(image_set *s) {
  for (size_t i = 0; s->img && i < s->img->n_layers; i++) {
    if (s->idx)
      st_layer_index_free(s->idx[i]);
    if (s->idx_frame)
      free(s->idx_frame[i]);
  }
  free(s->idx);
  free(s->idx_frame);
  free(s->idx_flen);
  free(s->manifest_frame);
  free(s->chunks.v);
  st_image_free(s->img);
}

static int image_set_alloc(image_set *s, st_error *err) {
  size_t n = s->img->n_layers + 1;
  s->idx = calloc(n, sizeof *s->idx);
  s->idx_frame = calloc(n, sizeof *s->idx_frame);
  s->idx_flen = calloc(n, sizeof *s->idx_flen);
  if (!s->idx || !s->idx_frame || !s->idx_flen)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  return ST_OK;
}

static int collect_chunks(image_set *s, st_error *err) {
  _cleanup_(st_dset_freep) st_dset *seen = st_dset_new();
  if (!seen)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < s->img->n_layers; i++)
    for (size_t j = 0; j < st_layer_index_count(s->idx[i]); j++) {
      const st_entry *e = st_layer_index_entry(s->idx[i], j);
      for (size_t k = 0; k < e->n_chunks; k++) {
        int r = st_dset_insert(seen, &e->chunks[k].digest, 0);
        if (r < 0 || (r == 1 && chunk_list_add(&s->chunks, &e->chunks[k]) < 0))
          return st_error_set(err, ST_ENOMEM, "out of memory");
      }
    }
  return ST_OK;
}

/* ---------------------------------------------------------------- blobs */

/* GetBlob: the frame of (k, d), checked to decompress to content hashing to d. */
static int fetch_blob(st_client *c, st_codec *codec, st_kind k, const st_digest *d,
                      uint8_t **frame_out, size_t *flen_out, uint8_t **data_out, size_t *len_out,
                      uint64_t *wire, st_error *err) {
  Strata__V1__GetBlobRequest req = STRATA__V1__GET_BLOB_REQUEST__INIT;
  req.kind = (Strata__V1__ObjectKind)k;
  req.digest.data = (uint8_t *)d->bytes;
  req.digest.len = ST_DIGEST_LEN;
  cl_call call;
  int r = cl_call_start(&call, c, "/strata.v1.Cas/GetBlob", err);
  if (r == ST_OK && (r = cl_call_send(&call, &req.base, err)) == ST_OK)
    r = cl_call_close_send(&call, err);
  _cleanup_free_ uint8_t *frame = NULL;
  size_t total = 0, have = 0;
  while (r == ST_OK) {
    Strata__V1__BlobPiece *p;
    r = cl_call_recv(&call, &strata__v1__blob_piece__descriptor, (ProtobufCMessage **)&p, err);
    if (r <= 0)
      break;
    r = ST_OK;
    if (!frame) {
      total = p->total;
      if (total == 0 || total > ST_STORE_BLOB_MAX)
        r = st_error_set(err, ST_EFORMAT, "server %s sent a blob of %zu bytes", c->target, total);
      else if (!(frame = malloc(total)))
        r = st_error_set(err, ST_ENOMEM, "out of memory");
    }
    if (r == ST_OK && p->data.len > total - have)
      r = st_error_set(err, ST_EFORMAT, "server %s sent more blob bytes than announced",
                       c->target);
    if (r == ST_OK) {
      memcpy(frame + have, p->data.data, p->data.len);
      have += p->data.len;
    }
    protobuf_c_message_free_unpacked(&p->base, NULL);
  }
  *wire += call.bytes_in;
  r = cl_call_finish(&call, r, err);
  char hex[ST_DIGEST_HEX_LEN + 1];
  if (r == ST_OK && (!frame || have != total))
    r = st_error_set(err, ST_EFORMAT, "server %s: %s sha256:%s truncated", c->target,
                     st_kind_name(k), st_digest_hex(d, hex));
  if (r < 0)
    return r;
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  if ((r = st_codec_decompress(codec, frame, have, ST_STORE_BLOB_MAX, &data, &len, err)) < 0)
    return st_error_prefix(err, "%s sha256:%s from %s", st_kind_name(k), st_digest_hex(d, hex),
                           c->target);
  st_digest got;
  st_sha256(&got, data, len);
  if (!st_digest_equal(&got, d))
    return st_error_set(err, ST_ECORRUPT, "%s sha256:%s from %s does not match its digest",
                        st_kind_name(k), st_digest_hex(d, hex), c->target);
  *frame_out = ST_TAKE_PTR(frame);
  *flen_out = have;
  *data_out = ST_TAKE_PTR(data);
  *len_out = len;
  return ST_OK;
}

/* ------------------------------------------------------------ chunk streams */

/* What the streams of one transfer share. */
typedef struct {
  const st_transfer_opts *opts;
  st_rate rate;
  atomic_bool stop;
  _Atomic uint64_t done;   /* uncompressed bytes of the chunks moved so far */
  uint64_t total;          /* ... of all the chunks that move */
  /* The flusher of a pull: publishes verified chunks every second (so that
   * a killed pull does not fetch them again) without holding up a stream. */
  st_store *flush_store;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool streams_done;
  st_error flush_err;
  int flush_rc;
} xfer;

static void *flusher(void *arg) {
  xfer *x = arg;
  pthread_mutex_lock(&x->lock);
  while (!x->streams_done && x->flush_rc == ST_OK) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&x->wake, &x->lock, &ts);
    if (x->streams_done)
      break;
    pthread_mutex_unlock(&x->lock);
    int rc = st_store_flush(x->flush_store, &x->flush_err);
    pthread_mutex_lock(&x->lock);
    x->flush_rc = rc;
  }
  pthread_mutex_unlock(&x->lock);
  if (x->flush_rc < 0)
    atomic_store(&x->stop, true);
  return NULL;
}

/* After a batch of `bytes` (compressed) covering `raw` uncompressed bytes:
 * progress, then the rate limit. */
static void xfer_account(xfer *x, size_t bytes, uint64_t raw) {
  uint64_t done = atomic_fetch_add(&x->done, raw) + raw;
  if (x->opts->progress)
    x->opts->progress(done, x->total, x->opts->progress_ud);
  st_rate_wait(&x->rate, bytes);
}

typedef struct {
  st_client *client;
  st_store *store;
  const st_chunk_ref *chunks; /* this stream's share */
  size_t n;
  xfer *x;
  uint64_t frames_bytes, moved, moved_bytes, present;
  st_error err;
  int rc;
} stream_job;

/* One Read request for chunks[0..n): stores every frame after verifying it. */
static int read_batch(stream_job *j, const st_chunk_ref *chunks, size_t n) {
  st_error *err = &j->err;
  _cleanup_free_ ProtobufCBinaryData *ds = calloc(n, sizeof *ds);
  if (!ds)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    ds[i] = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)chunks[i].digest.bytes};
  Strata__V1__ReadRequest req = STRATA__V1__READ_REQUEST__INIT;
  req.n_digests = n;
  req.digests = ds;
  cl_call call;
  int r = cl_call_start(&call, j->client, "/strata.v1.Cas/Read", err);
  if (r == ST_OK && (r = cl_call_send(&call, &req.base, err)) == ST_OK)
    r = cl_call_close_send(&call, err);
  size_t next = 0;
  char hex[ST_DIGEST_HEX_LEN + 1];
  while (r == ST_OK && !atomic_load(&j->x->stop)) {
    Strata__V1__ReadResponse *resp;
    r = cl_call_recv(&call, &strata__v1__read_response__descriptor, (ProtobufCMessage **)&resp,
                     err);
    if (r <= 0)
      break;
    r = ST_OK;
    size_t bytes = 0;
    uint64_t raw = 0;
    for (size_t i = 0; r == ST_OK && i < resp->n_frames; i++) {
      const Strata__V1__Frame *f = resp->frames[i];
      if (next >= n || f->digest.len != ST_DIGEST_LEN ||
          memcmp(f->digest.data, chunks[next].digest.bytes, ST_DIGEST_LEN)) {
        r = st_error_set(err, ST_EFORMAT, "server %s sent a chunk that was not asked for",
                         j->client->target);
        break;
      }
      r = st_store_put_frame(j->store, ST_KIND_CHUNK, &chunks[next].digest, f->data.data,
                             f->data.len, err);
      if (r < 0)
        st_error_prefix(err, "chunk sha256:%s from %s",
                        st_digest_hex(&chunks[next].digest, hex), j->client->target);
      j->frames_bytes += f->data.len;
      j->moved++;
      j->moved_bytes += chunks[next].size;
      bytes += f->data.len;
      raw += chunks[next].size;
      next++;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (r == ST_OK)
      xfer_account(j->x, bytes, raw);
  }
  if (r == ST_OK && atomic_load(&j->x->stop))
    r = st_error_set(err, ST_ECANCELED, "canceled");
  r = cl_call_finish(&call, r, err);
  if (r == ST_OK && next != n)
    r = st_error_set(err, ST_EFORMAT, "server %s sent %zu of %zu chunks", j->client->target,
                     next, n);
  return r;
}

static void *read_stream(void *arg) {
  stream_job *j = arg;
  j->rc = ST_OK;
  for (size_t off = 0; off < j->n && j->rc == ST_OK; off += BATCH_DIGESTS) {
    size_t n = j->n - off < BATCH_DIGESTS ? j->n - off : BATCH_DIGESTS;
    j->rc = read_batch(j, j->chunks + off, n);
  }
  if (j->rc < 0)
    atomic_store(&j->x->stop, true);
  return NULL;
}

static void *write_stream(void *arg) {
  stream_job *j = arg;
  st_error *err = &j->err;
  cl_call call;
  int r = cl_call_start(&call, j->client, "/strata.v1.Cas/Write", err);
  Strata__V1__Frame frames[64], *ptrs[64];
  size_t nf = 0, bytes = 0;
  uint64_t raw = 0;
  char hex[ST_DIGEST_HEX_LEN + 1];
  for (size_t i = 0; r == ST_OK && i <= j->n; i++) {
    if (i < j->n) {
      uint8_t *frame;
      size_t flen;
      r = st_store_get_frame(j->store, ST_KIND_CHUNK, &j->chunks[i].digest, &frame, &flen, err);
      if (r < 0) {
        st_error_prefix(err, "local chunk sha256:%s", st_digest_hex(&j->chunks[i].digest, hex));
        break;
      }
      strata__v1__frame__init(&frames[nf]);
      frames[nf].digest = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)j->chunks[i].digest.bytes};
      frames[nf].data = (ProtobufCBinaryData){flen, frame};
      ptrs[nf] = &frames[nf];
      nf++;
      bytes += flen;
      raw += j->chunks[i].size;
      j->moved_bytes += j->chunks[i].size;
    }
    if (nf && (i == j->n || nf == ST_ARRAY_SIZE(frames) || bytes >= BATCH_BYTES)) {
      Strata__V1__WriteRequest req = STRATA__V1__WRITE_REQUEST__INIT;
      req.n_frames = nf;
      req.frames = ptrs;
      if (atomic_load(&j->x->stop))
        r = st_error_set(err, ST_ECANCELED, "canceled");
      else
        r = cl_call_send(&call, &req.base, err);
      for (size_t k = 0; k < nf; k++)
        free(frames[k].data.data);
      j->frames_bytes += bytes;
      if (r == ST_OK)
        xfer_account(j->x, bytes, raw);
      nf = bytes = 0;
      raw = 0;
    }
  }
  for (size_t k = 0; k < nf; k++)
    free(frames[k].data.data);
  if (r == ST_OK)
    r = cl_call_close_send(&call, err);
  if (r == ST_OK) {
    Strata__V1__WriteResponse *resp;
    r = cl_call_recv(&call, &strata__v1__write_response__descriptor, (ProtobufCMessage **)&resp,
                     err);
    if (r == 1) {
      j->moved = resp->stored;
      j->present = resp->already_present;
      protobuf_c_message_free_unpacked(&resp->base, NULL);
      r = ST_OK;
    } else if (r == 0)
      r = st_error_set(err, ST_EIO, "no response to Cas.Write");
  }
  j->rc = cl_call_finish(&call, r, err);
  if (j->rc < 0)
    atomic_store(&j->x->stop, true);
  return NULL;
}

/* Runs fn over chunks split into opts->streams contiguous shares, in
 * parallel. */
static int run_streams(st_client *c, st_store *store, const st_chunk_ref *chunks, size_t n,
                       const st_transfer_opts *opts, void *(*fn)(void *),
                       st_transfer_stats *stats, st_error *err) {
  if (n == 0)
    return ST_OK;
  unsigned streams = opts->streams ? opts->streams : DEFAULT_STREAMS;
  if (streams > n)
    streams = (unsigned)n;
  stream_job *jobs = calloc(streams, sizeof *jobs);
  pthread_t *threads = calloc(streams, sizeof *threads);
  if (!jobs || !threads) {
    free(jobs);
    free(threads);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  xfer x = {.opts = opts, .stop = false, .lock = PTHREAD_MUTEX_INITIALIZER,
            .wake = PTHREAD_COND_INITIALIZER};
  st_rate_init(&x.rate, opts->max_rate);
  x.flush_store = store;
  pthread_t flush_thread;
  bool flushing = fn == read_stream && !pthread_create(&flush_thread, NULL, flusher, &x);
  for (size_t i = 0; i < n; i++)
    x.total += chunks[i].size;
  size_t off = 0;
  unsigned started = 0;
  for (unsigned i = 0; i < streams; i++) {
    size_t share = n / streams + (i < n % streams ? 1 : 0);
    jobs[i] = (stream_job){.client = c, .store = store, .chunks = chunks + off, .n = share,
                           .x = &x};
    off += share;
    if (pthread_create(&threads[i], NULL, fn, &jobs[i]))
      break;
    started++;
  }
  int rc = started == streams ? ST_OK : st_error_set(err, ST_EIO, "cannot start threads");
  if (rc < 0)
    atomic_store(&x.stop, true);
  for (unsigned i = 0; i < started; i++) {
    pthread_join(threads[i], NULL);
    stats->bytes_moved += jobs[i].frames_bytes;
    stats->chunks_moved += jobs[i].moved;
    stats->chunks_present += jobs[i].present;
    stats->chunk_bytes_moved += jobs[i].moved_bytes;
    /* the first real error, not the cancellations it caused */
    if (jobs[i].rc < 0 && (rc == ST_OK || (rc == ST_ECANCELED && jobs[i].rc != ST_ECANCELED))) {
      rc = jobs[i].rc;
      *err = jobs[i].err;
    }
  }
  if (flushing) {
    pthread_mutex_lock(&x.lock);
    x.streams_done = true;
    pthread_cond_signal(&x.wake);
    pthread_mutex_unlock(&x.lock);
    pthread_join(flush_thread, NULL);
    if (x.flush_rc < 0 && (rc == ST_OK || rc == ST_ECANCELED)) {
      rc = x.flush_rc;
      *err = x.flush_err;
    }
  }
  pthread_mutex_destroy(&x.lock);
  pthread_cond_destroy(&x.wake);
  free(jobs);
  free(threads);
  st_rate_destroy(&x.rate);
  return rc;
}

/* ---------------------------------------------------------------- pull */

static int resolve_ref(st_client *c, const char *ref, st_digest *d, st_error *err) {
  if (!strncmp(ref, "sha256:", 7))
    return st_digest_parse(d, ref, err);
  return st_client_resolve(c, ref, d, err);
}

static int pull_objects(st_client *c, st_store *store, image_set *s, const st_transfer_opts *opts,
                        st_transfer_stats *stats, st_error *err) {
  _cleanup_(st_codec_freep) st_codec *codec = NULL;
  int r = st_codec_new(&codec, 1, err);
  if (r < 0)
    return r;
  _cleanup_free_ uint8_t *mdata = NULL;
  size_t mlen;
  if ((r = fetch_blob(c, codec, ST_KIND_MANIFEST, &s->digest, &s->manifest_frame,
                      &s->manifest_flen, &mdata, &mlen, &stats->bytes_moved, err)) < 0)
    return r;
  if ((r = st_image_decode(&s->img, mdata, mlen, err)) < 0 || (r = image_set_alloc(s, err)) < 0)
    return r;
  stats->layers_total = s->img->n_layers;
  for (size_t i = 0; i < s->img->n_layers; i++) {
    const st_digest *ld = &s->img->layers[i].digest;
    if ((r = st_store_has(store, ST_KIND_INDEX, ld, err)) < 0)
      return r;
    if (r == 1) {
      if ((r = st_layer_index_load(&s->idx[i], store, ld, err)) < 0)
        return r;
      continue;
    }
    _cleanup_free_ uint8_t *data = NULL;
    size_t len;
    if ((r = fetch_blob(c, codec, ST_KIND_INDEX, ld, &s->idx_frame[i], &s->idx_flen[i], &data,
                        &len, &stats->bytes_moved, err)) < 0 ||
        (r = st_layer_index_decode(&s->idx[i], data, len, err)) < 0)
      return r;
    stats->layers_moved++;
  }
  if ((r = collect_chunks(s, err)) < 0)
    return r;
  stats->chunks_total = s->chunks.n;
  chunk_list missing = {0};
  for (size_t i = 0; i < s->chunks.n; i++) {
    r = st_store_has(store, ST_KIND_CHUNK, &s->chunks.v[i].digest, err);
    if (r == 0 && chunk_list_add(&missing, &s->chunks.v[i]) < 0)
      r = st_error_set(err, ST_ENOMEM, "out of memory");
    if (r < 0) {
      free(missing.v);
      return r;
    }
    if (r == 1) {
      stats->chunks_present++;
      stats->chunk_bytes_present += s->chunks.v[i].size;
    }
  }
  r = run_streams(c, store, missing.v, missing.n, opts, read_stream, stats, err);
  free(missing.v);
  return r;
}

static int pull_commit(st_store *store, image_set *s, st_error *err) {
  int r = st_store_flush(store, err);
  for (size_t i = 0; r == ST_OK && i < s->img->n_layers; i++)
    if (s->idx_frame[i])
      r = st_store_put_frame(store, ST_KIND_INDEX, &s->img->layers[i].digest, s->idx_frame[i],
                             s->idx_flen[i], err);
  if (r == ST_OK)
    r = st_store_flush(store, err);
  if (r == ST_OK)
    r = st_store_put_frame(store, ST_KIND_MANIFEST, &s->digest, s->manifest_frame,
                           s->manifest_flen, err);
  if (r == ST_OK)
    r = st_store_flush(store, err);
  return r;
}

int st_client_pull(st_client *c, st_store *store, const char *ref, const st_transfer_opts *opts,
                   st_digest *image_out, st_transfer_stats *stats, st_error *err) {
  static const st_transfer_opts defaults = {0};
  if (!opts)
    opts = &defaults;
  st_transfer_stats local = {0};
  if (!stats)
    stats = &local;
  memset(stats, 0, sizeof *stats);
  double t0 = st_now();
  image_set s = {0};
  _cleanup_free_ char *name = NULL, *tag = NULL;
  int r = ST_OK;
  if (strncmp(ref, "sha256:", 7))
    r = st_image_ref_parse(ref, &name, &tag, err);
  if (r == ST_OK)
    r = resolve_ref(c, ref, &s.digest, err);
  if (r == ST_OK)
    r = pull_objects(c, store, &s, opts, stats, err);
  if (r == ST_OK)
    r = pull_commit(store, &s, err);
  if (r == ST_OK && name)
    r = st_tag_set(store, name, tag, &s.digest, err);
  if (r == ST_OK && image_out)
    *image_out = s.digest;
  image_set_clear(&s);
  stats->seconds = st_now() - t0;
  return r;
}

/* ---------------------------------------------------------------- push */

/* FindMissing over refs (chunks) or digests; missing ones appended to out. */
static int find_missing(st_client *c, st_kind k, const st_digest *const *ds, size_t n,
                        bool *missing, st_error *err) {
  for (size_t off = 0; off < n; off += BATCH_DIGESTS) {
    size_t m = n - off < BATCH_DIGESTS ? n - off : BATCH_DIGESTS;
    _cleanup_free_ ProtobufCBinaryData *v = calloc(m, sizeof *v);
    if (!v)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    _cleanup_(st_dset_freep) st_dset *set = st_dset_new();
    if (!set)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    for (size_t i = 0; i < m; i++)
      v[i] = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)ds[off + i]->bytes};
    Strata__V1__FindMissingRequest req = STRATA__V1__FIND_MISSING_REQUEST__INIT;
    req.kind = (Strata__V1__ObjectKind)k;
    req.n_digests = m;
    req.digests = v;
    Strata__V1__FindMissingResponse *resp = NULL;
    int r = cl_unary(c, "/strata.v1.Cas/FindMissing", &req.base,
                     &strata__v1__find_missing_response__descriptor, (ProtobufCMessage **)&resp,
                     err);
    if (r < 0)
      return r;
    for (size_t i = 0; i < resp->n_missing && r == ST_OK; i++) {
      st_digest d;
      if (resp->missing[i].len != ST_DIGEST_LEN)
        r = st_error_set(err, ST_EFORMAT, "bad digest in FindMissing response");
      else {
        memcpy(d.bytes, resp->missing[i].data, ST_DIGEST_LEN);
        if (st_dset_insert(set, &d, 0) < 0)
          r = st_error_set(err, ST_ENOMEM, "out of memory");
      }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (r < 0)
      return r;
    for (size_t i = 0; i < m; i++)
      missing[off + i] = st_dset_get(set, ds[off + i], NULL);
  }
  return ST_OK;
}

static int put_blob(st_client *c, st_store *store, st_kind k, const st_digest *d,
                    st_transfer_stats *stats, st_error *err) {
  _cleanup_free_ uint8_t *frame = NULL;
  size_t flen;
  int r = st_store_get_frame(store, k, d, &frame, &flen, err);
  if (r < 0)
    return r;
  cl_call call;
  r = cl_call_start(&call, c, "/strata.v1.Cas/PutBlob", err);
  for (size_t off = 0; r == ST_OK && off < flen; off += BATCH_BYTES) {
    Strata__V1__BlobPiece p = STRATA__V1__BLOB_PIECE__INIT;
    p.kind = (Strata__V1__ObjectKind)k;
    if (off == 0) {
      p.digest = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)d->bytes};
      p.total = flen;
    }
    p.data = (ProtobufCBinaryData){flen - off < BATCH_BYTES ? flen - off : BATCH_BYTES,
                                   frame + off};
    r = cl_call_send(&call, &p.base, err);
  }
  if (r == ST_OK)
    r = cl_call_close_send(&call, err);
  if (r == ST_OK) {
    ProtobufCMessage *resp;
    r = cl_call_recv(&call, &strata__v1__put_blob_response__descriptor, &resp, err);
    if (r == 1)
      protobuf_c_message_free_unpacked(resp, NULL);
    r = r == 1 ? ST_OK : r == 0 ? st_error_set(err, ST_EIO, "no response to PutBlob") : r;
  }
  stats->bytes_moved += flen;
  return cl_call_finish(&call, r, err);
}

static int push_objects(st_client *c, st_store *store, image_set *s, const st_transfer_opts *opts,
                        st_transfer_stats *stats, st_error *err) {
  int r = st_image_load(&s->img, store, &s->digest, err);
  if (r < 0 || (r = image_set_alloc(s, err)) < 0)
    return r;
  stats->layers_total = s->img->n_layers;
  for (size_t i = 0; i < s->img->n_layers; i++)
    if ((r = st_layer_index_load(&s->idx[i], store, &s->img->layers[i].digest, err)) < 0)
      return r;
  if ((r = collect_chunks(s, err)) < 0)
    return r;
  stats->chunks_total = s->chunks.n;
  size_t n = s->chunks.n, nl = s->img->n_layers;
  _cleanup_free_ const st_digest **ds = calloc(n + nl + 1, sizeof *ds);
  _cleanup_free_ bool *miss = calloc(n + nl + 1, sizeof *miss);
  if (!ds || !miss)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    ds[i] = &s->chunks.v[i].digest;
  if ((r = find_missing(c, ST_KIND_CHUNK, ds, n, miss, err)) < 0)
    return r;
  chunk_list missing = {0};
  for (size_t i = 0; i < n && r == ST_OK; i++) {
    if (miss[i])
      r = chunk_list_add(&missing, &s->chunks.v[i]) < 0 ? st_error_set(err, ST_ENOMEM, "out of memory") : ST_OK;
    else {
      stats->chunks_present++;
      stats->chunk_bytes_present += s->chunks.v[i].size;
    }
  }
  if (r == ST_OK)
    r = run_streams(c, store, missing.v, missing.n, opts, write_stream, stats, err);
  free(missing.v);
  if (r < 0)
    return r;
  for (size_t i = 0; i < nl; i++)
    ds[i] = &s->img->layers[i].digest;
  if ((r = find_missing(c, ST_KIND_INDEX, ds, nl, miss, err)) < 0)
    return r;
  for (size_t i = 0; i < nl && r == ST_OK; i++)
    if (miss[i]) {
      r = put_blob(c, store, ST_KIND_INDEX, ds[i], stats, err);
      stats->layers_moved++;
    }
  if (r == ST_OK)
    r = put_blob(c, store, ST_KIND_MANIFEST, &s->digest, stats, err);
  return r;
}

int st_client_push(st_client *c, st_store *store, const char *ref, const st_transfer_opts *opts,
                   st_digest *image_out, st_transfer_stats *stats, st_error *err) {
  static const st_transfer_opts defaults = {0};
  if (!opts)
    opts = &defaults;
  st_transfer_stats local = {0};
  if (!stats)
    stats = &local;
  memset(stats, 0, sizeof *stats);
  double t0 = st_now();
  image_set s = {0};
  _cleanup_free_ char *name = NULL, *tag = NULL;
  int r = st_image_resolve(store, ref, &s.digest, err);
  if (r == ST_OK && strncmp(ref, "sha256:", 7))
    r = st_image_ref_parse(ref, &name, &tag, err);
  if (r == ST_OK)
    r = push_objects(c, store, &s, opts, stats, err);
  if (r == ST_OK && name)
    r = st_client_tag(c, name, tag, &s.digest, err);
  if (r == ST_OK && image_out)
    *image_out = s.digest;
  image_set_clear(&s);
  stats->seconds = st_now() - t0;
  return r;
}

/* ---------------------------------------------------------------- one layer */

int st_client_push_layer(st_client *c, st_store *store, const st_digest *layer, unsigned streams,
                         st_transfer_stats *stats, st_error *err) {
  st_transfer_stats local = {0};
  if (!stats)
    stats = &local;
  memset(stats, 0, sizeof *stats);
  double t0 = st_now();
  st_layer_index *idx = NULL;
  int r = st_layer_index_load(&idx, store, layer, err);
  if (r < 0)
    return r;
  st_image one = {.n_layers = 1};
  image_set s = {.digest = *layer, .img = &one, .idx = &idx};
  r = collect_chunks(&s, err);
  stats->layers_total = 1;
  stats->chunks_total = s.chunks.n;
  size_t n = s.chunks.n;
  const st_digest **ds = calloc(n + 1, sizeof *ds);
  bool *miss = calloc(n + 1, sizeof *miss);
  chunk_list missing = {0};
  if (r == ST_OK && (!ds || !miss))
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; r == ST_OK && i < n; i++)
    ds[i] = &s.chunks.v[i].digest;
  if (r == ST_OK)
    r = find_missing(c, ST_KIND_CHUNK, ds, n, miss, err);
  for (size_t i = 0; i < n && r == ST_OK; i++) {
    if (miss[i]) {
      if (chunk_list_add(&missing, &s.chunks.v[i]) < 0)
        r = st_error_set(err, ST_ENOMEM, "out of memory");
    } else {
      stats->chunks_present++;
      stats->chunk_bytes_present += s.chunks.v[i].size;
    }
  }
  st_transfer_opts o = {.streams = streams};
  if (r == ST_OK)
    r = run_streams(c, store, missing.v, missing.n, &o, write_stream, stats, err);
  const st_digest *ld = layer;
  if (r == ST_OK)
    r = find_missing(c, ST_KIND_INDEX, &ld, 1, miss, err);
  if (r == ST_OK && miss[0]) {
    r = put_blob(c, store, ST_KIND_INDEX, layer, stats, err);
    stats->layers_moved++;
  }
  free(missing.v);
  free(ds);
  free(miss);
  free(s.chunks.v);
  st_layer_index_free(idx);
  stats->seconds = st_now() - t0;
  return r;
}
