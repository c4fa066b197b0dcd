/* SPDX-License-Identifier: Apache-2.0 */
/* Build contexts: the local files a recipe reads (its `extends` bases and the inputs of the
 * cells to build) packed into one layer, so that they travel to a build server like any other
 * data (chunked, deduplicated, verified through the store), and materialised there again in a
 * private directory where the ordinary build engine reads them. docs/BUILDS.md.
 *
 * The context layer keeps each file at its path relative to the deepest directory that holds
 * the recipe and everything it reads, so relative paths in the recipe resolve the same way on
 * both ends. A build request names the recipe by that relative path and carries its text. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "build.h"
#include "digest.h"
#include "error.h"
#include "layer-index.h"
#include "layer-writer.h"
#include "recipe.h"
#include "store.h"

/* What a client submits. Everything owned (st_build_request_clear). */
typedef struct {
  char *recipe_name; /* the recipe's path relative to the context root, e.g. "app/r.yaml" */
  char *recipe_text; /* its text, NUL-terminated (recipe_len bytes before the NUL) */
  size_t recipe_len;
  bool has_context;  /* false: the recipe reads no file at all */
  st_digest context; /* the context layer (index digest) when has_context */
  char *cells;       /* --cell filter "k=v[,k=v...]", NULL for every cell */
  int64_t mtime;     /* normalised mtime of the build: 0 or SOURCE_DATE_EPOCH */
} st_build_request;

void st_build_request_clear(st_build_request *req);

/* Client side: loads the recipe at recipe_path, checks the cell filter (nullable), instantiates
 * every selected cell (so every input must exist) and packs the `extends` bases and every
 * input of those cells into a context layer in s (threads: chunk workers, 0 = inline). *out
 * (cleared by the caller with st_build_request_clear) is written on success; stats (nullable)
 * gets the packing figures. Errors:
 *   ST_EFORMAT, ST_ENOENT   the recipe or an input: "FILE:LINE:COL: message"; also an
 *                           absolute input path, which a server cannot see;
 *   ST_EINVAL               a bad cell filter, or one matching no cell;
 *   ST_EIO, ST_ENOMEM, ...  reading an input or writing the store, naming the file. */
int st_build_context_pack(st_store *s, const char *recipe_path, const char *cells,
                          int64_t mtime, unsigned threads, st_build_request *out,
                          st_pack_stats *stats, st_error *err);

/* Checks the parts of a request that need no file: recipe_name is a relative path without
 * '.' or '..' components, the text is at most ST_RECIPE_MAX_BYTES. ST_EINVAL naming the
 * problem. */
int st_build_request_check(const st_build_request *req, st_error *err);

/* Server side. A materialised context: the directory and the context layer's index. */
typedef struct st_build_context st_build_context;

/* Creates dir (must not exist) with the context unpacked in it (every chunk verified; a
 * missing one is ST_ENOENT naming it), or an empty directory without a context. threads as
 * above. *out (st_build_context_free, which also removes dir) written on success; on
 * failure nothing is left at dir. */
int st_build_context_open(st_build_context **out, st_store *s, const st_build_request *req,
                          const char *dir, unsigned threads, st_error *err);
/* Removes the directory and frees. NULL is a no-op. */
void st_build_context_free(st_build_context *c);
ST_DEFINE_FREEP(st_build_context, st_build_context_free)

/* Loads the request's recipe (its text, resolving relative paths and `extends` inside the
 * context), applies the cell filter and instantiates each selected cell. Every file the
 * recipe reads must lie inside the context directory after resolving symlinks (ST_EUNSAFE
 * otherwise): a submitted recipe cannot read the server's own files. *out is an array of
 * *n_out instances (st_build_instances_free). Errors as st_build_context_pack. */
int st_build_context_instances(st_build_context *c, const st_build_request *req,
                               st_recipe_instance ***out, size_t *n_out, st_error *err);
void st_build_instances_free(st_recipe_instance **v, size_t n);

/* An st_build_input_fn (ud: the st_build_context): the digest of an input inside the context,
 * computed from the context index (entries' types, modes, owners, sizes, chunk digests,
 * targets, xattrs), so that a layer's cache key does not depend on where or when the context
 * was materialised. False for paths outside the context. */
bool st_build_context_input_digest(const char *path, st_source_kind kind, st_digest *out,
                                   void *ud);
