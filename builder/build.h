/* SPDX-License-Identifier: Apache-2.0 */
/* The build engine: one instantiated recipe cell in, one image out. Each
 * layer's build cache key is the SHA-256 of its canonical spec, the digests
 * of its inputs and the key of the layer below; a layer whose key is in the
 * store is reused, otherwise it is built from its sources, deletes and run
 * steps. docs/RECIPES.md describes the keys.
 *
 *   for each layer (bottom first):
 *     inputs_from_stat_cache() ── all known ──> key ── in store ──> CACHED
 *            │ some unknown                          └─ absent ──┐
 *            └──────────────────────────────> build_layer() <────┘
 *                 sources (hashing inputs as they stream) -> deletes
 *                 -> dpkg status -> run steps (bwrap) -> key -> BUILT
 *   manifest -> tag
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"
#include "recipe.h"
#include "store.h"

typedef enum {
  ST_BUILD_EV_CACHED,   /* layer reused */
  ST_BUILD_EV_BUILDING, /* layer about to be built */
  ST_BUILD_EV_BUILT,    /* layer built */
  ST_BUILD_EV_PLAN,     /* dry run: key computed, cached tells if present */
  ST_BUILD_EV_LOG,      /* a line printed by a run step */
  ST_BUILD_EV_IMAGE,    /* image stored and tagged */
} st_build_event_kind;

typedef struct {
  st_build_event_kind kind;
  const char *ref;      /* image:tag */
  const char *cell;     /* cell name ("" without a matrix) */
  const char *layer;    /* layer name (not for IMAGE) */
  size_t index, count;  /* layer position, number of layers */
  st_digest key;        /* layer key */
  st_digest digest;     /* layer digest (CACHED, BUILT, PLAN if cached), image digest */
  bool cached;          /* PLAN: the key is in the store */
  uint64_t bytes;       /* layer content bytes */
  uint64_t bytes_new;   /* BUILT: compressed bytes this layer added to the store */
  double seconds;       /* BUILT: time spent */
  const char *line;     /* LOG */
} st_build_event;

typedef void (*st_build_event_fn)(const st_build_event *ev, void *ud);
/* Asked first for the digest of each input path (kind tells how the engine
 * would digest it). Returns true with *out set when it knows the digest;
 * the engine then neither hashes the input nor records it in the stat cache.
 * For inputs materialised from a known layer (a build context), whose
 * paths and stat data change at every materialisation. */
typedef bool (*st_build_input_fn)(const char *path, st_source_kind kind, st_digest *out,
                                  void *ud);

typedef struct {
  unsigned threads;          /* chunk workers (0 = inline) */
  int64_t mtime;             /* normalised mtime: 0 or SOURCE_DATE_EPOCH */
  bool dry_run;              /* plan: compute keys (hashing inputs), build nothing */
  const char *tmpdir;        /* for run-step roots; NULL = $TMPDIR or /var/tmp */
  st_build_event_fn on_event;/* nullable */
  void *ud;
  st_build_input_fn input_digest; /* nullable */
  void *input_ud;
  const atomic_int *cancel;  /* nullable: once non-zero the build stops before the next
                                layer and a running `run` command is killed: ST_ECANCELED */
} st_build_opts;

/* Builds (or, with dry_run, plans) one instance. image_out (nullable) gets
 * the image digest (not on a dry run). Errors name the layer and the input;
 * ST_ECANCELED when o->cancel was raised. */
int st_build_instance(st_store *s, const st_recipe_instance *ri, const st_build_opts *o,
                      st_digest *image_out, st_error *err);
