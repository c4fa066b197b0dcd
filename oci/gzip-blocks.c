/* SPDX-License-Identifier: Apache-2.0 */
/* Parallel, deterministic gzip: the input is cut into fixed blocks of
 * ST_OCI_GZIP_BLOCK bytes; workers compress each block with libdeflate into
 * a complete gzip member, and the writer emits the members in order. A
 * sequence of members is one valid gzip file (RFC 1952 2.2) that gzip, Go's
 * compress/gzip, Python and containerd read as the concatenated input. The
 * bytes depend only on the input, never on the number of workers or their
 * timing. (libdeflate compresses a block about three times faster than zlib
 * at the same level, with a slightly smaller output; its blocks cannot be
 * primed with the data before them, which costs under 1% in size.)
 *
 *   st_oci_gzip_write ─ block full ─> take a slot (else emit own oldest)
 *        ─> st_pool_submit(compress_block) ─> ... ─> emit_oldest (in order)
 *   st_oci_gzip_finish ─> last block ─> emit all
 *
 * Memory is bounded by the pool's slots: at most that many blocks (input and
 * output) exist at once across all streams sharing the pool. A stream with
 * blocks in flight never blocks on a slot (it emits its own oldest block
 * instead), so streams sharing a pool cannot wait on each other forever. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <libdeflate.h>

#include "oci.h"
#include "pool.h"

#define LEVEL 6

struct block {
  uint8_t *in;
  size_t in_len;
  uint8_t *out;
  size_t out_len;
  bool done, failed;
  struct st_oci_gzip_pool *gp;
  struct block *next;
};

struct st_oci_gzip_pool {
  st_pool *pool;
  pthread_mutex_t lock;
  pthread_cond_t cond; /* a block is done, or a slot was freed */
  unsigned free_slots;
};

struct st_oci_gzip {
  st_oci_gzip_pool *gp;
  st_oci_gzip_pool *own; /* a private inline pool when none was given */
  st_oci_gzip_out_fn out_fn;
  void *ud;
  struct block *cur;         /* being filled */
  struct block *head, *tail; /* submitted, oldest first */
  uint64_t blocks;           /* submitted so far */
  bool failed;
};

int st_oci_gzip_pool_new(st_oci_gzip_pool **out, unsigned threads, st_error *err) {
  st_oci_gzip_pool *gp = calloc(1, sizeof *gp);
  if (!gp)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = st_pool_new(&gp->pool, threads, 0, err);
  if (rc < 0) {
    free(gp);
    return rc;
  }
  pthread_mutex_init(&gp->lock, NULL);
  pthread_cond_init(&gp->cond, NULL);
  gp->free_slots = 2 * threads + 2;
  *out = gp;
  return ST_OK;
}

void st_oci_gzip_pool_free(st_oci_gzip_pool *gp) {
  if (!gp)
    return;
  st_pool_free(gp->pool);
  pthread_cond_destroy(&gp->cond);
  pthread_mutex_destroy(&gp->lock);
  free(gp);
}

static void block_free(struct block *b) {
  if (b) {
    free(b->in);
    free(b->out);
    free(b);
  }
}

/* Worker: b->in as one gzip member. */
static void compress_block(void *arg) {
  struct block *b = arg;
  struct libdeflate_compressor *c = libdeflate_alloc_compressor(LEVEL);
  size_t cap = c ? libdeflate_gzip_compress_bound(c, b->in_len) : 0;
  bool ok = c && (b->out = malloc(cap)) != NULL;
  if (ok)
    ok = (b->out_len = libdeflate_gzip_compress(c, b->in, b->in_len, b->out, cap)) > 0;
  libdeflate_free_compressor(c);
  free(b->in); /* not needed any more: keeps memory to about one copy per slot */
  b->in = NULL;
  pthread_mutex_lock(&b->gp->lock);
  b->failed = !ok;
  b->done = true;
  pthread_cond_broadcast(&b->gp->cond);
  pthread_mutex_unlock(&b->gp->lock);
}

static int out(st_oci_gzip *z, const void *p, size_t n) {
  if (!z->failed && z->out_fn(z->ud, p, n) < 0)
    z->failed = true;
  return z->failed ? -1 : 0;
}

/* Waits for the oldest submitted block, emits it and frees its slot. */
static int emit_oldest(st_oci_gzip *z) {
  st_oci_gzip_pool *gp = z->gp;
  struct block *b = z->head;
  pthread_mutex_lock(&gp->lock);
  while (!b->done)
    pthread_cond_wait(&gp->cond, &gp->lock);
  pthread_mutex_unlock(&gp->lock);
  z->head = b->next;
  if (!z->head)
    z->tail = NULL;
  if (b->failed)
    z->failed = true;
  out(z, b->out, b->out_len);
  block_free(b);
  pthread_mutex_lock(&gp->lock);
  gp->free_slots++;
  pthread_cond_broadcast(&gp->cond);
  pthread_mutex_unlock(&gp->lock);
  return z->failed ? -1 : 0;
}

/* Takes a slot for one more block; emits own blocks while none is free. */
static int take_slot(st_oci_gzip *z) {
  st_oci_gzip_pool *gp = z->gp;
  pthread_mutex_lock(&gp->lock);
  for (;;) {
    if (gp->free_slots) {
      gp->free_slots--;
      break;
    }
    if (z->head) {
      pthread_mutex_unlock(&gp->lock);
      if (emit_oldest(z) < 0)
        return -1;
      pthread_mutex_lock(&gp->lock);
      continue;
    }
    pthread_cond_wait(&gp->cond, &gp->lock);
  }
  pthread_mutex_unlock(&gp->lock);
  return 0;
}

/* Hands the current block to the workers. */
static int submit(st_oci_gzip *z) {
  struct block *b = z->cur;
  z->cur = NULL;
  b->gp = z->gp;
  if (take_slot(z) < 0) {
    block_free(b);
    return -1;
  }
  if (z->tail)
    z->tail->next = b;
  else
    z->head = b;
  z->tail = b;
  z->blocks++;
  st_pool_submit(z->gp->pool, compress_block, b);
  return 0;
}

static struct block *block_new(void) {
  struct block *b = calloc(1, sizeof *b);
  if (b && !(b->in = malloc(ST_OCI_GZIP_BLOCK))) {
    free(b);
    b = NULL;
  }
  return b;
}

int st_oci_gzip_new(st_oci_gzip **out, st_oci_gzip_pool *gp, st_oci_gzip_out_fn out_fn, void *ud,
                    st_error *err) {
  st_oci_gzip *z = calloc(1, sizeof *z);
  if (!z)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  z->out_fn = out_fn;
  z->ud = ud;
  z->gp = gp;
  if (!gp) {
    int rc = st_oci_gzip_pool_new(&z->own, 0, err);
    if (rc < 0) {
      free(z);
      return rc;
    }
    z->gp = z->own;
  }
  *out = z;
  return ST_OK;
}

int st_oci_gzip_write(st_oci_gzip *z, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n && !z->failed) {
    if (!z->cur && !(z->cur = block_new()))
      return z->failed = true, -1;
    size_t k = ST_OCI_GZIP_BLOCK - z->cur->in_len;
    k = k < n ? k : n;
    memcpy(z->cur->in + z->cur->in_len, p, k);
    z->cur->in_len += k;
    p += k;
    n -= k;
    if (z->cur->in_len == ST_OCI_GZIP_BLOCK && submit(z) < 0)
      return -1;
  }
  return z->failed ? -1 : 0;
}

int st_oci_gzip_finish(st_oci_gzip *z) {
  /* the last, partial block; an empty input still gives one (empty) member */
  if (!z->failed && !z->cur && !z->blocks && !(z->cur = block_new()))
    z->failed = true;
  if (!z->failed && z->cur)
    submit(z);
  while (z->head)
    emit_oldest(z);
  return z->failed ? -1 : 0;
}

void st_oci_gzip_free(st_oci_gzip *z) {
  if (!z)
    return;
  z->failed = true; /* nothing more is written out */
  while (z->head)
    emit_oldest(z);
  block_free(z->cur);
  st_oci_gzip_pool_free(z->own);
  free(z);
}
