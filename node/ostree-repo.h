/* SPDX-License-Identifier: Apache-2.0 */
/* The node's OSTree repository: layers written as commits (ref
 * strata/layer/<hex>), images as union commits of their layers (ref
 * strata/image/<hex>), checkouts, pruning. The only file that sees GLib:
 * every GError is converted to an st_error here. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cleanup.h"
#include "digest.h"
#include "error.h"
#include "store.h"

typedef struct st_ostree st_ostree;

/* Opens DIR (creating it when missing): mode bare when running as root,
 * bare-user-only otherwise; an existing repo keeps its mode. */
int st_ostree_open(st_ostree **out, const char *path, st_error *err);
void st_ostree_free(st_ostree *r);
ST_DEFINE_FREEP(st_ostree, st_ostree_free)
/* True for a bare-user-only repo (ownership and set-id bits are dropped). */
bool st_ostree_user_mode(const st_ostree *r);

/* 1 if the layer / image commit exists, 0 if not, <0 error. */
int st_ostree_has_layer(st_ostree *r, const st_digest *layer, st_error *err);
int st_ostree_has_image(st_ostree *r, const st_digest *image, st_error *err);

typedef struct {
  uint64_t files;   /* regular files, symlinks and directories written */
  uint64_t bytes;   /* content bytes written */
  /* regular files whose content object the repo had (file map): not read
   * from the cache, not written */
  uint64_t files_reused, bytes_reused;
} st_ostree_layer_stats;

/* Writes layer `layer` (its index and chunks must be in cache, every chunk
 * is verified again as it is read; a file the repo already holds, by the
 * file map <repo>.files, reuses its object) as one commit in its own
 * transaction:
 * regular files on `threads` workers, then the tree, the commit with the
 * layer's whiteouts and opaque directories in its metadata, and the ref. A
 * failure aborts the transaction: no ref, nothing visible. */
int st_ostree_write_layer(st_ostree *r, st_store *cache, const st_digest *layer, unsigned threads,
                          st_ostree_layer_stats *stats, st_error *err);

/* Composes the committed layers (bottom first) into one image commit by
 * merging their directory trees (whiteouts and opaque directories of each
 * layer applied to the layers below it) and sets the image ref. */
int st_ostree_write_image(st_ostree *r, const st_digest *image, const st_digest *layers,
                          size_t n_layers, st_error *err);

/* Checks the image commit out (hardlinks) into dfd/path, which must not
 * exist. */
int st_ostree_checkout_image(st_ostree *r, const st_digest *image, int dfd, const char *path,
                             st_error *err);

/* Deletes the image ref / a layer ref (a missing ref is not an error). */
int st_ostree_delete_image(st_ostree *r, const st_digest *image, st_error *err);
int st_ostree_delete_layer(st_ostree *r, const st_digest *layer, st_error *err);
/* Removes every object no ref reaches; freed_out (nullable) gets the bytes. */
int st_ostree_prune(st_ostree *r, uint64_t *freed_out, st_error *err);

/* Calls cb for each layer (images=false) or image (images=true) ref of the
 * repo; a non-zero return stops and is returned. */
int st_ostree_list(st_ostree *r, bool images, int (*cb)(const st_digest *d, void *ud), void *ud,
                   st_error *err);
