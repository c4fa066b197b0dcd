/* SPDX-License-Identifier: Apache-2.0 */
/* Parallel, deterministic gzip (the way pigz does it): the input is cut into
 * fixed blocks of ST_OCI_GZIP_BLOCK bytes; workers deflate each block as raw
 * deflate primed with the last 32 KiB of the block before it, ending with a
 * sync flush (the last block with the final bit); the writer emits the
 * blocks in order between one gzip header and a trailer whose CRC-32 is
 * combined from the blocks'. The bytes depend only on the input, never on
 * the number of workers or their timing.
 *
 *   st_oci_gzip_write ─ block full ─> take a slot (else emit own oldest)
 *        ─> st_pool_submit(deflate_block) ─> ... ─> emit_oldest (in order)
 *   st_oci_gzip_finish ─> last block ─> emit all ─> trailer
 *
 * Memory is bounded by the pool's slots: at most that many blocks (input and
 * output) exist at once across all streams sharing the pool. A stream with
 * blocks in flight never blocks on a slot (it emits its own oldest block
 * instead), so streams sharing a pool cannot wait on each other forever. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "oci.h"
#include "pool.h"

#define DICT (32u << 10)
#define LEVEL 6

struct block {
  uint8_t *in;
  size_t in_len;
  uint8_t dict[DICT];
  size_t dict_len;
  uint8_t *out;
  size_t out_len;
  uint32_t crc;
  bool last, done, failed;
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
  uint8_t dict[DICT];        /* the last bytes of the input so far */
  size_t dict_len;
  uint32_t crc;
  uint64_t total;
  bool header_done, failed;
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

/* Worker: raw deflate of b->in primed with b->dict. */
static void deflate_block(void *arg) {
  struct block *b = arg;
  z_stream z = {0};
  bool ok = deflateInit2(&z, LEVEL, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK;
  size_t cap = ok ? deflateBound(&z, b->in_len) + 64 : 0;
  if (ok && b->dict_len)
    ok = deflateSetDictionary(&z, b->dict, (uInt)b->dict_len) == Z_OK;
  if (ok)
    ok = (b->out = malloc(cap)) != NULL;
  if (ok) {
    z.next_in = b->in;
    z.avail_in = (uInt)b->in_len;
    z.next_out = b->out;
    z.avail_out = (uInt)cap;
    int zr = deflate(&z, b->last ? Z_FINISH : Z_SYNC_FLUSH);
    ok = z.avail_in == 0 && (b->last ? zr == Z_STREAM_END : zr == Z_OK);
    b->out_len = cap - z.avail_out;
    b->crc = (uint32_t)crc32(0, b->in, (uInt)b->in_len);
  }
  deflateEnd(&z);
  free(b->in); /* not needed any more: keeps memory to one copy per slot */
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
  static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}; /* no name, time 0, Unix */
  if (!z->header_done && out(z, header, sizeof header) == 0)
    z->header_done = true;
  out(z, b->out, b->out_len);
  z->crc = (uint32_t)crc32_combine(z->crc, b->crc, (z_off_t)b->in_len);
  z->total += b->in_len;
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
static int submit(st_oci_gzip *z, bool last) {
  struct block *b = z->cur;
  z->cur = NULL;
  b->last = last;
  b->gp = z->gp;
  memcpy(b->dict, z->dict, z->dict_len);
  b->dict_len = z->dict_len;
  /* the next block's dictionary: the last DICT bytes of the input so far */
  if (b->in_len >= DICT) {
    memcpy(z->dict, b->in + b->in_len - DICT, DICT);
    z->dict_len = DICT;
  } else {
    size_t keep = z->dict_len + b->in_len > DICT ? DICT - b->in_len : z->dict_len;
    memmove(z->dict, z->dict + z->dict_len - keep, keep);
    memcpy(z->dict + keep, b->in, b->in_len);
    z->dict_len = keep + b->in_len;
  }
  if (take_slot(z) < 0) {
    block_free(b);
    return -1;
  }
  if (z->tail)
    z->tail->next = b;
  else
    z->head = b;
  z->tail = b;
  st_pool_submit(z->gp->pool, deflate_block, b);
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
  z->crc = (uint32_t)crc32(0, NULL, 0);
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
    if (z->cur->in_len == ST_OCI_GZIP_BLOCK && submit(z, false) < 0)
      return -1;
  }
  return z->failed ? -1 : 0;
}

int st_oci_gzip_finish(st_oci_gzip *z) {
  if (!z->failed && !z->cur && !(z->cur = block_new()))
    z->failed = true;
  if (!z->failed)
    submit(z, true);
  while (z->head)
    emit_oldest(z);
  uint8_t trailer[8];
  for (int i = 0; i < 4; i++) {
    trailer[i] = (uint8_t)(z->crc >> (8 * i));
    trailer[4 + i] = (uint8_t)(z->total >> (8 * i)); /* ISIZE: the length mod 2^32 */
  }
  out(z, trailer, sizeof trailer);
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
