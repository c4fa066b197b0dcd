/* SPDX-License-Identifier: Apache-2.0 */
/* Copying an image between two stores: its manifest, its layer indexes and
 * only the chunks the destination lacks, each chunk verified on arrival.
 * Used by the node pre-warm with a local source store. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"
#include "store.h"

typedef struct {
  uint64_t chunks_needed;  /* distinct chunks of the copied layers */
  uint64_t chunks_fetched; /* of those, copied (the destination lacked them) */
  uint64_t bytes_fetched;  /* compressed bytes copied (chunks, indexes, manifest) */
  uint64_t bytes_reused;   /* uncompressed bytes of needed chunks already present */
  uint64_t bytes_needed;   /* uncompressed bytes of all needed chunks */
  uint64_t files;          /* entries of the copied layers */
  uint64_t layers_copied;  /* layers whose chunks were considered */
} st_copy_stats;

typedef struct {
  unsigned threads;   /* parallel chunk copies; 0 = inline */
  uint64_t max_rate;  /* bytes per second, 0 = unlimited */
  /* Nullable: return false to skip a layer entirely (neither its index nor
   * its chunks are copied), e.g. because the destination already turned it
   * into something else. */
  bool (*want_layer)(const st_digest *layer, void *ud);
  void *want_ud;
  /* Nullable: called with the bytes copied so far and the bytes to copy
   * once known (may be called from several threads). */
  void (*progress)(uint64_t done, uint64_t total, void *ud);
  void *progress_ud;
} st_copy_opts;

/* Copies image `image` from src to dst. Chunks go first (each one
 * decompressed and hashed by st_store_put_frame: a damaged one is
 * ST_ECORRUPT naming it), then, once they are durable, each layer index,
 * then the manifest: a destination that has an index has its chunks. A
 * failure leaves the destination consistent (whatever was stored is
 * complete and verified; chunks are published at least every second);
 * a re-run copies only what is still missing.
 * stats (nullable) are accumulated into. */
int st_image_copy(st_store *dst, st_store *src, const st_digest *image, const st_copy_opts *opts,
                  st_copy_stats *stats, st_error *err);
