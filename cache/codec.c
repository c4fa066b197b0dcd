/* SPDX-License-Identifier: Apache-2.0 */
/* zstd one-frame-per-object codec with pooled contexts. */
#include "codec.h"

#include <pthread.h>
#include <stdlib.h>
#include <zstd.h>

#include "cleanup.h"

#define POOL_MAX 64

struct st_codec {
  int level;
  pthread_mutex_t lock;
  ZSTD_CCtx *cctx[POOL_MAX];
  ZSTD_DCtx *dctx[POOL_MAX];
  unsigned n_cctx, n_dctx;
};

int st_codec_new(st_codec **out, int level, st_error *err) {
  if (level < 1 || level > 19)
    return st_error_set(err, ST_EINVAL, "zstd level %d is outside 1..19", level);
  st_codec *c = calloc(1, sizeof *c);
  if (!c)
    return st_error_set(err, ST_ENOMEM, "codec: out of memory");
  c->level = level;
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return ST_OK;
}

void st_codec_free(st_codec *c) {
  if (!c)
    return;
  for (unsigned i = 0; i < c->n_cctx; i++)
    ZSTD_freeCCtx(c->cctx[i]);
  for (unsigned i = 0; i < c->n_dctx; i++)
    ZSTD_freeDCtx(c->dctx[i]);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

int st_codec_level(const st_codec *c) { return c->level; }

static ZSTD_CCtx *take_cctx(st_codec *c) {
  ZSTD_CCtx *x = NULL;
  pthread_mutex_lock(&c->lock);
  if (c->n_cctx)
    x = c->cctx[--c->n_cctx];
  pthread_mutex_unlock(&c->lock);
  if (!x) {
    x = ZSTD_createCCtx();
    if (x) {
      ZSTD_CCtx_setParameter(x, ZSTD_c_compressionLevel, c->level);
      ZSTD_CCtx_setParameter(x, ZSTD_c_contentSizeFlag, 1);
      ZSTD_CCtx_setParameter(x, ZSTD_c_checksumFlag, 0);
    }
  }
  return x;
}

static void give_cctx(st_codec *c, ZSTD_CCtx *x) {
  pthread_mutex_lock(&c->lock);
  if (c->n_cctx < POOL_MAX) {
    c->cctx[c->n_cctx++] = x;
    x = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  ZSTD_freeCCtx(x);
}

static ZSTD_DCtx *take_dctx(st_codec *c) {
  ZSTD_DCtx *x = NULL;
  pthread_mutex_lock(&c->lock);
  if (c->n_dctx)
    x = c->dctx[--c->n_dctx];
  pthread_mutex_unlock(&c->lock);
  return x ? x : ZSTD_createDCtx();
}

static void give_dctx(st_codec *c, ZSTD_DCtx *x) {
  pthread_mutex_lock(&c->lock);
  if (c->n_dctx < POOL_MAX) {
    c->dctx[c->n_dctx++] = x;
    x = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  ZSTD_freeDCtx(x);
}

int st_codec_compress(st_codec *c, const void *src, size_t len, uint8_t **out, size_t *out_len,
                      st_error *err) {
  size_t bound = ZSTD_compressBound(len);
  _cleanup_free_ uint8_t *buf = malloc(bound);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "compress: out of memory");
  ZSTD_CCtx *x = take_cctx(c);
  if (!x)
    return st_error_set(err, ST_ENOMEM, "compress: out of memory");
  /* compress2 with a known source size records it in the frame header. */
  size_t n = ZSTD_compress2(x, buf, bound, src, len);
  give_cctx(c, x);
  if (ZSTD_isError(n))
    return st_error_set(err, ST_EIO, "compress: %s", ZSTD_getErrorName(n));
  *out = ST_TAKE_PTR(buf);
  *out_len = n;
  return ST_OK;
}

int st_codec_frame_size(const void *frame, size_t flen, uint64_t *size_out, st_error *err) {
  unsigned long long sz = ZSTD_getFrameContentSize(frame, flen);
  if (sz == ZSTD_CONTENTSIZE_ERROR)
    return st_error_set(err, ST_ECORRUPT, "not a zstd frame");
  if (sz == ZSTD_CONTENTSIZE_UNKNOWN)
    return st_error_set(err, ST_ECORRUPT, "zstd frame does not record its size");
  *size_out = sz;
  return ST_OK;
}

int st_codec_decompress(st_codec *c, const void *frame, size_t flen, size_t max, uint8_t **out,
                        size_t *out_len, st_error *err) {
  uint64_t sz;
  int rc = st_codec_frame_size(frame, flen, &sz, err);
  if (rc < 0)
    return rc;
  if (sz > max)
    return st_error_set(err, ST_ELIMIT, "frame content size %llu exceeds the limit of %zu",
                        (unsigned long long)sz, max);
  size_t fsz = ZSTD_findFrameCompressedSize(frame, flen);
  if (ZSTD_isError(fsz))
    return st_error_set(err, ST_ECORRUPT, "truncated zstd frame: %s", ZSTD_getErrorName(fsz));
  if (fsz != flen)
    return st_error_set(err, ST_ECORRUPT, "%zu trailing bytes after the zstd frame", flen - fsz);
  _cleanup_free_ uint8_t *buf = malloc((size_t)sz + 1);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "decompress: out of memory");
  ZSTD_DCtx *x = take_dctx(c);
  if (!x)
    return st_error_set(err, ST_ENOMEM, "decompress: out of memory");
  size_t n = ZSTD_decompressDCtx(x, buf, (size_t)sz, frame, flen);
  give_dctx(c, x);
  if (ZSTD_isError(n))
    return st_error_set(err, ST_ECORRUPT, "zstd: %s", ZSTD_getErrorName(n));
  if (n != sz)
    return st_error_set(err, ST_ECORRUPT, "frame decodes to %zu bytes, header says %llu", n,
                        (unsigned long long)sz);
  buf[n] = 0;
  *out = ST_TAKE_PTR(buf);
  *out_len = n;
  return ST_OK;
}
