/* SPDX-License-Identifier: Apache-2.0 */
/* FastCDC (Xia et al., 2016/2020): a gear rolling hash, cut-point skipping
 * up to the minimum size, and normalised chunking with a stricter mask below
 * the average size and a looser one above it. */
#include "chunker.h"

#include <pthread.h>

/* The gear table is part of the store format: it comes from splitmix64 with
 * this seed ("STRATA01") and must never change. docs/FORMAT.md records it. */
#define GEAR_SEED 0x5354524154413031ull

static uint64_t gear[256];
static pthread_once_t gear_once = PTHREAD_ONCE_INIT;

static void gear_init(void) {
  uint64_t x = GEAR_SEED;
  for (int i = 0; i < 256; i++) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    gear[i] = z ^ (z >> 31);
  }
}

st_chunk_params st_chunk_params_default(void) {
  return (st_chunk_params){ST_CHUNK_MIN_DEFAULT, ST_CHUNK_AVG_DEFAULT, ST_CHUNK_MAX_DEFAULT};
}

int st_chunk_params_check(const st_chunk_params *p, st_error *err) {
  if (p->min < ST_CHUNK_MIN_LIMIT || p->max > ST_CHUNK_MAX_LIMIT)
    return st_error_set(err, ST_EINVAL, "chunk sizes must lie within %u..%u bytes",
                        ST_CHUNK_MIN_LIMIT, ST_CHUNK_MAX_LIMIT);
  if (!(p->min < p->avg && p->avg < p->max))
    return st_error_set(err, ST_EINVAL, "chunk sizes must satisfy min < avg < max (got %u/%u/%u)",
                        p->min, p->avg, p->max);
  if (p->avg & (p->avg - 1))
    return st_error_set(err, ST_EINVAL, "average chunk size %u is not a power of two", p->avg);
  return ST_OK;
}

/* The n most significant bits: in a gear hash bit k depends on the last k+1
 * bytes, so the high bits are the ones that see a whole 64-byte window. */
static uint64_t top_bits(unsigned n) { return n == 0 ? 0 : (~0ull) << (64 - n); }

void st_chunker_init(st_chunker *c, const st_chunk_params *p) {
  pthread_once(&gear_once, gear_init);
  unsigned bits = 0;
  while ((1u << bits) < p->avg)
    bits++;
  c->min = p->min;
  c->avg = p->avg;
  c->max = p->max;
  c->mask_s = top_bits(bits + 2);
  c->mask_l = top_bits(bits > 2 ? bits - 2 : 1);
  st_chunker_reset(c);
}

void st_chunker_reset(st_chunker *c) {
  c->fp = 0;
  c->len = 0;
}

static size_t cut(st_chunker *c, size_t k) {
  c->len = 0;
  c->fp = 0;
  return k;
}

size_t st_chunker_scan(st_chunker *c, const uint8_t *p, size_t n) {
  const size_t base = c->len; /* bytes of the current chunk before p[0] */
  uint64_t fp = c->fp;
  size_t i = 0;

  /* Cut-point skipping: no boundary, and no hashing, below the minimum. */
  if (base < c->min) {
    i = c->min - base;
    if (i >= n) {
      c->len = base + n;
      return 0;
    }
  }
  /* p[i] is byte base+i of the chunk. Below the average size the stricter
   * mask applies, above it the looser one (normalised chunking). */
  size_t end = base + i < c->avg ? c->avg - base : i;
  if (end > n)
    end = n;
  for (const uint64_t mask = c->mask_s; i < end; i++) {
    fp = (fp << 1) + gear[p[i]];
    if (!(fp & mask))
      return cut(c, i + 1);
  }
  end = c->max - base;
  if (end > n)
    end = n;
  for (const uint64_t mask = c->mask_l; i < end; i++) {
    fp = (fp << 1) + gear[p[i]];
    if (!(fp & mask))
      return cut(c, i + 1);
  }
  if (base + i >= c->max)
    return cut(c, i);
  c->len = base + n;
  c->fp = fp;
  return 0;
}
