/* SPDX-License-Identifier: Apache-2.0 */
/* Recreating a layer's tree on disk: contents (every chunk verified),
 * modes, symlinks, hardlinks, xattrs where the file system allows, ownership
 * when running as root, mtimes. Every path is resolved one component at a
 * time with O_NOFOLLOW below DEST, so nothing is ever written outside it. */
#pragma once

#include <stdint.h>

#include "layer-index.h"
#include "layer-writer.h"
#include "store.h"

typedef struct {
  unsigned threads;        /* 0 = inline */
  int chown;               /* apply uid/gid (default: when euid is 0) */
  st_progress_fn progress; /* nullable */
  void *progress_ud;
} st_unpack_opts;

typedef struct {
  uint64_t files, dirs, symlinks, hardlinks, bytes, xattrs_skipped;
} st_unpack_stats;

/* The options callers get by default. */
st_unpack_opts st_unpack_opts_default(void);

/* Unpacks idx into dest. If dest does not exist the tree is built in a
 * sibling temp directory and renamed into place only when complete (a
 * failure leaves nothing); if dest is an existing directory entries are
 * created inside it, replacing files of the same name. stats nullable. */
int st_layer_unpack(st_store *s, const st_layer_index *idx, const char *dest,
                    const st_unpack_opts *opts, st_unpack_stats *stats, st_error *err);

/* rm -rf of dirfd/path without following symlinks. */
int st_remove_tree(int dirfd, const char *path, st_error *err);
