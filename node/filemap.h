/* SPDX-License-Identifier: Apache-2.0 */
/* The node's file map (DIR = <node>/repo.files): which OSTree content object
 * holds a file with a given identity — owner, mode, xattrs, size and chunk
 * list as written to the repo — so that a layer commit reuses the objects of
 * files it already has (ostree_repo_has_object) instead of reading their
 * chunks and writing them again. Append-only records, each with its own
 * check value; a torn or damaged record is skipped on load, an entry whose
 * object was pruned is ignored by the caller's has_object test. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"

typedef struct st_filemap st_filemap;

/* Loads path (missing: empty). */
int st_filemap_open(st_filemap **out, const char *path, st_error *err);
void st_filemap_free(st_filemap *m);

/* The object checksum (32 bytes) recorded for key; NULL if none. Safe from
 * several threads as long as no st_filemap_add runs. */
const uint8_t *st_filemap_get(const st_filemap *m, const st_digest *key);

/* Records keys[i] -> csums[i] (32 bytes each) in memory and appends them to
 * the file (one write, then fdatasync). Call after the objects are
 * committed. */
int st_filemap_add(st_filemap *m, const st_digest *keys, const uint8_t (*csums)[32], size_t n,
                   st_error *err);
