/* SPDX-License-Identifier: Apache-2.0 */
/* Whole-store checks and figures: fsck verifies every object (and that every
 * chunk a layer index names is present); stats adds up objects, stored and
 * logical bytes and the deduplication ratio. */
#pragma once

#include <stdint.h>

#include "store.h"

typedef struct {
  uint64_t objects[ST_KIND_COUNT];
  uint64_t stored_bytes[ST_KIND_COUNT];
  uint64_t bad;     /* objects that failed verification */
  uint64_t missing; /* chunks named by an index but absent */
} st_fsck_result;

/* Called once per problem; problem->msg names the object. */
typedef void (*st_fsck_report_fn)(const st_error *problem, void *ud);

/* Verifies every object with `threads` workers. Returns ST_OK when the store
 * is sound, ST_ECORRUPT when anything was reported (err says how much), or
 * another code if the check itself could not run. */
int st_store_fsck(st_store *s, unsigned threads, st_fsck_report_fn report, void *ud,
                  st_fsck_result *res, st_error *err);

typedef struct {
  uint64_t objects[ST_KIND_COUNT];
  uint64_t stored_bytes[ST_KIND_COUNT];
  uint64_t layers;
  uint64_t logical_unique;      /* uncompressed bytes of distinct referenced chunks */
  uint64_t logical_referenced;  /* file bytes over all layers */
  uint64_t chunks_referenced;   /* distinct chunks named by some layer */
} st_store_stats;

int st_store_stats_get(st_store *s, st_store_stats *out, st_error *err);
