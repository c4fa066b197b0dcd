/* SPDX-License-Identifier: Apache-2.0 */
/* FastCDC content-defined chunking with normalised chunking (level 2).
 * Boundaries depend only on the bytes of one file since st_chunker_reset(),
 * never on how the caller splits them into buffers. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define ST_CHUNK_MIN_DEFAULT (16u * 1024)
#define ST_CHUNK_AVG_DEFAULT (64u * 1024)
#define ST_CHUNK_MAX_DEFAULT (256u * 1024)
/* Hard limits accepted in a store config or a layer index. */
#define ST_CHUNK_MIN_LIMIT 64u
#define ST_CHUNK_MAX_LIMIT (16u * 1024 * 1024)

typedef struct {
  uint32_t min, avg, max;
} st_chunk_params;

/* State of one chunker; embed it by value. Fields are private. */
typedef struct {
  uint32_t min, avg, max;
  uint64_t mask_s, mask_l;
  uint64_t fp;
  size_t len; /* bytes of the current chunk seen so far */
} st_chunker;

/* ST_OK if min <= avg <= max within the limits and avg is a power of two;
 * ST_EINVAL with a message otherwise. */
int st_chunk_params_check(const st_chunk_params *p, st_error *err);
st_chunk_params st_chunk_params_default(void);

/* p must have passed st_chunk_params_check. */
void st_chunker_init(st_chunker *c, const st_chunk_params *p);
/* Forget the current chunk: the next byte starts a new one (a new file). */
void st_chunker_reset(st_chunker *c);
/* Scans n bytes that continue the current chunk. Returns k in 1..n when a
 * boundary falls after p[k-1] (the chunk ends there and the chunker starts a
 * new one), or 0 when all n bytes belong to the current chunk. The caller
 * ends the last chunk of a file itself. */
size_t st_chunker_scan(st_chunker *c, const uint8_t *p, size_t n);
/* Bytes of the current, unfinished chunk. */
static inline size_t st_chunker_pending(const st_chunker *c) { return c->len; }
