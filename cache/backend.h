/* SPDX-License-Identifier: Apache-2.0 */
/* The storage backend ops table: raw bytes of content-addressed objects
 * (already compressed, already verified by the caller) plus small named
 * metadata files. st_store (store.h) adds hashing, compression and
 * verification on top. Backends: backend-dir.c (the on-disk store),
 * backend-mem.c (in memory; doubles as the test fake). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"

typedef enum {
  ST_KIND_CHUNK = 0,    /* file content pieces */
  ST_KIND_INDEX = 1,    /* layer indexes */
  ST_KIND_MANIFEST = 2, /* image manifests */
  ST_KIND_COUNT
} st_kind;

/* "chunks", "indexes", "manifests": the folder of each kind. */
const char *st_kind_dir(st_kind k);
/* "chunk", "index", "manifest": the word used in messages. */
const char *st_kind_name(st_kind k);

typedef struct st_backend st_backend;
/* Return non-zero to stop the listing; that value is returned by list. */
typedef int (*st_backend_list_cb)(const st_digest *d, uint64_t stored_size, void *ud);

typedef struct {
  const char *name;
  /* Reads the stored bytes (at most max; more is ST_ELIMIT). ST_ENOENT if
   * absent. *data is malloc'd, owned by the caller. */
  int (*get)(st_backend *b, st_kind k, const st_digest *d, size_t max, uint8_t **data,
             size_t *len, st_error *err);
  /* 1 if present, 0 if absent, <0 on error. */
  int (*has)(st_backend *b, st_kind k, const st_digest *d, st_error *err);
  /* Stores bytes under d; idempotent, safe against concurrent writers of the
   * same object. Visible and durable after the next flush at the latest. */
  int (*put)(st_backend *b, st_kind k, const st_digest *d, const void *data, size_t len,
             st_error *err);
  /* ST_ENOENT if absent. */
  int (*del)(st_backend *b, st_kind k, const st_digest *d, st_error *err);
  int (*list)(st_backend *b, st_kind k, st_backend_list_cb cb, void *ud, st_error *err);
  /* Makes every earlier put durable and visible. */
  int (*flush)(st_backend *b, st_error *err);
  /* Small named files (config, refs). Names are relative paths of
   * [A-Za-z0-9._-] components. ST_ENOENT if absent. */
  int (*meta_get)(st_backend *b, const char *name, size_t max, uint8_t **data, size_t *len,
                  st_error *err);
  int (*meta_put)(st_backend *b, const char *name, const void *data, size_t len, st_error *err);
  /* ST_ENOENT if absent. */
  int (*meta_del)(st_backend *b, const char *name, st_error *err);
  /* Every metadata name below the folder prefix (e.g. "tags"), in no
   * particular order; cb's non-zero return stops and is returned. */
  int (*meta_list)(st_backend *b, const char *prefix, int (*cb)(const char *name, void *ud),
                   void *ud, st_error *err);
  void (*free)(st_backend *b);
} st_backend_ops;

/* Every backend struct starts with this. */
struct st_backend {
  const st_backend_ops *ops;
};

/* The directory backend: DIR/chunks/ab/<hex>, DIR/indexes/ab/<hex>, ...
 * Puts are written to DIR/tmp and renamed into place by flush after one
 * syncfs(2), so a crash never exposes a partial object. create makes DIR.
 * Stale temp files of dead processes are removed on open. */
int st_backend_dir_open(st_backend **out, const char *dir, int create, st_error *err);

/* The in-memory backend. */
int st_backend_mem_new(st_backend **out, st_error *err);
/* Test knobs for the memory backend: after n more successful puts every put
 * fails with code (e.g. ST_ENOSPC); counters of calls made. */
void st_backend_mem_fail_puts_after(st_backend *b, long n, int code);
typedef struct {
  unsigned long gets, puts, has, dels;
} st_backend_mem_counts;
st_backend_mem_counts st_backend_mem_counters(st_backend *b);

static inline void st_backend_free(st_backend *b) {
  if (b)
    b->ops->free(b);
}
