/* SPDX-License-Identifier: Apache-2.0 */
/* st_image_copy: manifest, layer indexes and missing chunks from one store
 * into another. Chunk copies run on a bounded pool (the queue bounds the
 * frames in memory); an optional rate limit spaces them out. */
#include "image-copy.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "dset.h"
#include "fs.h"
#include "image.h"
#include "layer-index.h"
#include "pool.h"
#include "rate.h"

ST_DEFINE_FREEP(st_pool, st_pool_free)

typedef struct {
  st_store *dst, *src;
  const st_copy_opts *opts;
  pthread_mutex_t lock;
  st_error err; /* first failure */
  bool failed;
  uint64_t done, total;
  st_rate rate;
} copy_ctx;

typedef struct {
  copy_ctx *c;
  st_digest d;
} chunk_job;

/* Copies one object frame; returns its compressed size or a negative code. */
static int copy_frame(copy_ctx *c, st_kind k, const st_digest *d, uint64_t *flen_out,
                      st_error *err) {
  _cleanup_free_ uint8_t *frame = NULL;
  size_t flen = 0;
  int rc = st_store_get_frame(c->src, k, d, &frame, &flen, err);
  if (rc < 0)
    return rc;
  st_rate_wait(&c->rate, flen);
  rc = st_store_put_frame(c->dst, k, d, frame, flen, err);
  if (rc < 0)
    return rc;
  *flen_out = flen;
  return ST_OK;
}

static void chunk_task(void *arg) {
  chunk_job *j = arg;
  copy_ctx *c = j->c;
  pthread_mutex_lock(&c->lock);
  bool skip = c->failed;
  pthread_mutex_unlock(&c->lock);
  if (skip)
    return;
  st_error err = {0};
  uint64_t flen = 0;
  int rc = copy_frame(c, ST_KIND_CHUNK, &j->d, &flen, &err);
  pthread_mutex_lock(&c->lock);
  if (rc < 0 && !c->failed) {
    c->failed = true;
    c->err = err;
  }
  c->done += flen;
  uint64_t done = c->done, total = c->total;
  pthread_mutex_unlock(&c->lock);
  if (rc == ST_OK && c->opts->progress)
    c->opts->progress(done, total, c->opts->progress_ud);
}

/* The chunks of idx that dst lacks, each once (seen dedups across layers). */
static int missing_chunks(copy_ctx *c, const st_layer_index *idx, st_dset *seen, chunk_job **jobs,
                          size_t *n, size_t *cap, st_copy_stats *stats, st_error *err) {
  size_t count = st_layer_index_count(idx);
  for (size_t i = 0; i < count; i++) {
    const st_entry *e = st_layer_index_entry(idx, i);
    for (size_t k = 0; k < e->n_chunks; k++) {
      const st_chunk_ref *ch = &e->chunks[k];
      int r = st_dset_insert(seen, &ch->digest, 0);
      if (r < 0)
        return st_error_set(err, ST_ENOMEM, "out of memory");
      if (r == 0)
        continue;
      stats->chunks_needed++;
      stats->bytes_needed += ch->size;
      r = st_store_has(c->dst, ST_KIND_CHUNK, &ch->digest, err);
      if (r < 0)
        return r;
      if (r == 1) {
        stats->bytes_reused += ch->size;
        continue;
      }
      if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 1024;
        chunk_job *nj = realloc(*jobs, ncap * sizeof *nj);
        if (!nj)
          return st_error_set(err, ST_ENOMEM, "out of memory");
        *jobs = nj;
        *cap = ncap;
      }
      (*jobs)[(*n)++] = (chunk_job){c, ch->digest};
      /* progress total in compressed bytes is unknown; count raw sizes */
      c->total += ch->size;
    }
  }
  return ST_OK;
}

static int copy_chunks(copy_ctx *c, chunk_job *jobs, size_t n, st_copy_stats *stats,
                       st_error *err) {
  _cleanup_(st_pool_freep) st_pool *pool = NULL;
  int rc = st_pool_new(&pool, c->opts->threads, 0, err);
  if (rc < 0)
    return rc;
  /* Publish what arrived at least every second (or 64 MiB): a killed copy
   * keeps what it verified, and a re-run does not fetch it again. */
  double last = st_now();
  uint64_t flushed = 0;
  for (size_t i = 0; i < n; i++) {
    st_pool_submit(pool, chunk_task, &jobs[i]);
    if ((i + 1) % 32 == 0 && (st_now() - last >= 1.0 || c->done - flushed >= (64u << 20))) {
      st_pool_wait(pool);
      if (c->failed)
        break;
      if ((rc = st_store_flush(c->dst, err)) < 0)
        return rc;
      last = st_now();
      flushed = c->done;
    }
  }
  st_pool_wait(pool);
  stats->chunks_fetched += n;
  stats->bytes_fetched += c->done;
  if (c->failed) {
    *err = c->err;
    return err->code;
  }
  return st_store_flush(c->dst, err);
}

int st_image_copy(st_store *dst, st_store *src, const st_digest *image, const st_copy_opts *opts,
                  st_copy_stats *stats, st_error *err) {
  st_copy_opts defaults = {0};
  st_copy_stats local = {0};
  if (!opts)
    opts = &defaults;
  if (!stats)
    stats = &local;
  _cleanup_(st_image_freep) st_image *img = NULL;
  int rc = st_image_load(&img, src, image, err);
  if (rc < 0)
    return rc;
  copy_ctx c = {.dst = dst, .src = src, .opts = opts, .lock = PTHREAD_MUTEX_INITIALIZER};
  st_rate_init(&c.rate, opts->max_rate);
  st_layer_index **idxs = calloc(img->n_layers + 1, sizeof *idxs);
  st_dset *seen = st_dset_new();
  _cleanup_free_ chunk_job *jobs = NULL;
  size_t n = 0, cap = 0;
  if (!idxs || !seen) {
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < img->n_layers; i++) {
    const st_digest *ld = &img->layers[i].digest;
    if (opts->want_layer && !opts->want_layer(ld, opts->want_ud))
      continue;
    if ((rc = st_layer_index_load(&idxs[i], src, ld, err)) < 0)
      goto out;
    stats->files += st_layer_index_count(idxs[i]);
    stats->layers_copied++;
    if ((rc = missing_chunks(&c, idxs[i], seen, &jobs, &n, &cap, stats, err)) < 0)
      goto out;
  }
  if ((rc = copy_chunks(&c, jobs, n, stats, err)) < 0)
    goto out;
  /* Only now that every chunk is durable: the indexes, then the manifest. */
  for (size_t i = 0; i < img->n_layers; i++) {
    uint64_t flen = 0;
    if (!idxs[i])
      continue;
    rc = st_store_has(dst, ST_KIND_INDEX, &img->layers[i].digest, err);
    if (rc == 0 && (rc = copy_frame(&c, ST_KIND_INDEX, &img->layers[i].digest, &flen, err)) < 0)
      goto out;
    if (rc < 0)
      goto out;
    stats->bytes_fetched += flen;
  }
  rc = st_store_has(dst, ST_KIND_MANIFEST, image, err);
  if (rc == 0) {
    uint64_t flen = 0;
    if ((rc = copy_frame(&c, ST_KIND_MANIFEST, image, &flen, err)) < 0)
      goto out;
    stats->bytes_fetched += flen;
  }
  if (rc < 0)
    goto out;
  rc = st_store_flush(dst, err);
out:
  if (idxs)
    for (size_t i = 0; i < img->n_layers; i++)
      st_layer_index_free(idxs[i]);
  free(idxs);
  st_dset_free(seen);
  pthread_mutex_destroy(&c.lock);
  st_rate_destroy(&c.rate);
  return rc;
}
