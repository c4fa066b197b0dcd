/* SPDX-License-Identifier: Apache-2.0 */
/* The layer writer turns entries and file contents into a layer: contents
 * are cut by the chunker (a new chunk starts with every file), hashed,
 * compressed and stored by a thread pool, and finish() stores the sorted,
 * validated index. Sources (directory trees, archives) feed it. */
#pragma once

#include <stdint.h>

#include "cleanup.h"
#include "layer-index.h"
#include "store.h"

typedef struct st_layer_writer st_layer_writer;

typedef struct {
  uint64_t files, dirs, symlinks, hardlinks, whiteouts, skipped;
  uint64_t bytes;           /* logical bytes of all regular files */
  uint64_t chunks;          /* chunk references */
  uint64_t chunks_new;      /* chunks this writer added to the store */
  uint64_t bytes_new;       /* uncompressed bytes of those chunks */
  uint64_t bytes_new_stored;/* compressed bytes written for them */
} st_pack_stats;

/* threads 0 = hash and compress inline. *out written only on success. */
int st_layer_writer_new(st_layer_writer **out, st_store *s, unsigned threads, st_error *err);
/* Waits for outstanding work; drops an unfinished layer. NULL is a no-op. */
void st_layer_writer_free(st_layer_writer *w);
ST_DEFINE_FREEP(st_layer_writer, st_layer_writer_free)

/* Adds a directory, symlink, hardlink or whiteout entry (consumed). */
int st_layer_writer_add(st_layer_writer *w, st_entry *e, st_error *err);
/* Starts a regular file (e consumed; size and chunks are filled in as data
 * arrives). One file at a time. */
int st_layer_writer_begin_file(st_layer_writer *w, st_entry *e, st_error *err);
int st_layer_writer_write(st_layer_writer *w, const void *data, size_t len, st_error *err);
int st_layer_writer_end_file(st_layer_writer *w, st_error *err);
/* begin_file + the content of fd (up to EOF, or `size` bytes when the size
 * is known, saving the read that would only find EOF) + end_file. path names
 * fd in errors. */
int st_layer_writer_add_fd(st_layer_writer *w, st_entry *e, int fd, uint64_t size,
                           const char *path, st_error *err);

/* A regular file at dirfd/path of `size` bytes, read, cut, hashed and
 * stored by one pool task (for small files, so that their system calls run
 * on every worker). dirfd must stay open until finish. shown names the file
 * in errors, which surface at the next call or at finish. e consumed. */
#define ST_WHOLE_FILE_MAX (1u << 20)
int st_layer_writer_add_file_at(st_layer_writer *w, st_entry *e, int dirfd, const char *path,
                                uint64_t size, const char *shown, st_error *err);

/* Waits until every queued task has run (e.g. before closing a dirfd given
 * to add_file_at). Returns the first error of a task, if any. */
int st_layer_writer_wait(st_layer_writer *w, st_error *err);

/* Metadata of directories the writer adds itself: missing parents of added
 * entries, and the root if no source gave one. Default 0755 root:root,
 * mtime 0. */
void st_layer_writer_set_dir_defaults(st_layer_writer *w, uint32_t mode, uint32_t uid,
                                      uint32_t gid, int64_t mtime);
/* The composed layers below (borrowed until finish; nullable): a missing
 * parent directory that exists there is copied from there instead. */
void st_layer_writer_set_lower(st_layer_writer *w, const st_layer_index *lower);
/* Waits for every chunk, builds, validates and stores the index, flushes the
 * store. Entries of the same path: the last added wins. Missing parent
 * directories are added (see set_dir_defaults).
 * digest_out gets the layer digest; index_out (nullable) the index
 * (owned by caller). With digest_out NULL the index is validated but not
 * stored (an intermediate tree that only index_out, then required, keeps;
 * its chunks are stored). After a failure nothing references the partial
 * layer. */
int st_layer_writer_finish(st_layer_writer *w, st_digest *digest_out, st_layer_index **index_out,
                           st_error *err);

/* Marks the directory at path (relative) opaque, as an OCI
 * DIR/.wh..wh..opq marker does: at finish the last entry of that path, which
 * must be a directory (else ST_EFORMAT), hides the lower layers' contents;
 * a layer without an entry for it gets one (from the lower layers or the
 * dir defaults). ST_EUNSAFE for a bad path. */
#define ST_OPAQUE_MAX 65536
int st_layer_writer_mark_opaque(st_layer_writer *w, const char *path, st_error *err);
/* finish without storing the index: chunks are stored and flushed, the
 * normalised, validated index goes to *index_out (owned by caller). For
 * layers that only feed a composition. */
int st_layer_writer_finish_index(st_layer_writer *w, st_layer_index **index_out, st_error *err);
/* A regular entry whose chunks are already in the store (e.g. from another
 * layer), added as it is (e consumed). */
int st_layer_writer_add_stored(st_layer_writer *w, st_entry *e, st_error *err);

const st_pack_stats *st_layer_writer_stats(const st_layer_writer *w);
/* Counts an input entry that was skipped (e.g. a device node). */
void st_layer_writer_skip(st_layer_writer *w);

/* Packing a directory tree. */
typedef void (*st_progress_fn)(uint64_t done, uint64_t total, void *ud);
typedef struct {
  int64_t mtime;       /* every entry gets this mtime... */
  int keep_mtime;      /* ...unless set: keep the source's (seconds) */
  int owner_root;      /* record uid/gid 0 instead of the source's */
  int owner_fixed;     /* record uid/gid below instead (wins over owner_root) */
  uint32_t uid, gid;
  const char *dest;    /* nullable: relative layer path where dir itself lands
                          (checked with st_path_check); NULL or "" = the root */
  st_progress_fn progress; /* nullable */
  void *progress_ud;
  int overlay_upper;   /* dir is an overlayfs upper directory: a 0:0
                          character device is a whiteout, a directory whose
                          trusted.overlay.opaque (user.overlay.opaque when
                          mounted with userxattr) is "y" is opaque, and the
                          overlay's own *.overlay.* xattrs are not recorded */
} st_pack_opts;

/* Walks dir (not following symlinks) and adds every entry to w: regular
 * files, directories, symlinks, hardlinks (by inode), xattrs. Device nodes,
 * sockets and FIFOs are skipped with a warning. With opts->dest every path
 * (and hardlink target) is laid under dest, and dir's own entry is dest.
 * An unsafe dest is ST_EUNSAFE. */
int st_layer_pack_dir(st_layer_writer *w, const char *dir, const st_pack_opts *opts,
                      st_error *err);
