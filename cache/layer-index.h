/* SPDX-License-Identifier: Apache-2.0 */
/* The layer index: the sorted list of a layer's entries (files, directories,
 * symlinks, hardlinks, whiteouts) with metadata, xattrs and, for regular
 * files, the chunks of their content. Serialised deterministically as the
 * strata.v1.LayerIndex protobuf message (proto/format.proto); the layer
 * digest is the SHA-256 of that serialisation. docs/FORMAT.md. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunker.h"
#include "digest.h"
#include "cleanup.h"
#include "error.h"
#include "store.h"

#define ST_LAYER_INDEX_VERSION 1
#define ST_PATH_MAX 4096
#define ST_NAME_MAX 255
#define ST_XATTR_MAX (64u * 1024)

typedef enum {
  ST_ENTRY_REGULAR = 1,
  ST_ENTRY_DIR = 2,
  ST_ENTRY_SYMLINK = 3,
  ST_ENTRY_HARDLINK = 4,
  ST_ENTRY_WHITEOUT = 5,
} st_entry_type;

typedef struct {
  st_digest digest;
  uint32_t size;
} st_chunk_ref;

typedef struct {
  char *name;     /* owned */
  uint8_t *value; /* owned */
  size_t len;
} st_xattr;

typedef struct {
  char *path; /* owned; "" is the root, no leading or trailing '/' */
  st_entry_type type;
  uint32_t mode; /* 07777 bits */
  uint32_t uid, gid;
  int64_t mtime;
  uint64_t size;         /* regular: content bytes */
  st_chunk_ref *chunks;  /* owned, regular files */
  size_t n_chunks;
  char *target;          /* owned (nullable): symlink target, hardlink path */
  st_xattr *xattrs;      /* owned, sorted by name */
  size_t n_xattrs;
  bool opaque;           /* directory hides lower layers' contents */
} st_entry;

typedef struct st_layer_index st_layer_index;

/* NULL on OOM. chunking is recorded in the index. */
st_layer_index *st_layer_index_new(const st_chunk_params *chunking);
void st_layer_index_free(st_layer_index *idx);
ST_DEFINE_FREEP(st_layer_index, st_layer_index_free)
/* Frees the heap fields of an entry (not the entry itself). */
void st_entry_clear(st_entry *e);
/* Deep copy of src into *dst; ST_ENOMEM leaves *dst cleared. */
int st_entry_copy(st_entry *dst, const st_entry *src, st_error *err);

/* Appends *e, taking ownership of its heap fields (*e is zeroed), also on
 * failure (they are freed). Order does not matter until sort/encode. */
int st_layer_index_add(st_layer_index *idx, st_entry *e, st_error *err);
size_t st_layer_index_count(const st_layer_index *idx);
const st_entry *st_layer_index_entry(const st_layer_index *idx, size_t i);
st_entry *st_layer_index_entry_mut(st_layer_index *idx, size_t i);
const st_chunk_params *st_layer_index_chunking(const st_layer_index *idx);
/* Sorts entries by path (bytewise). */
void st_layer_index_sort(st_layer_index *idx);
/* Sorts, keeps only the last-added entry of each path (a later source
 * overrides an earlier one), and adds every missing parent directory
 * (including the root): a copy of that directory in `lower` (nullable: the
 * composed layers below, so that an upper layer does not change a lower
 * directory's owner or mode just by putting a file in it), else of
 * *dir_template (path and type ignored). Validation is left to encode. */
int st_layer_index_normalize(st_layer_index *idx, const st_entry *dir_template,
                             const st_layer_index *lower, st_error *err);
/* Binary search on a sorted index; NULL if absent. */
const st_entry *st_layer_index_find(const st_layer_index *idx, const char *path);
/* Sum of regular file sizes. */
uint64_t st_layer_index_content_bytes(const st_layer_index *idx);

/* Checks a relative entry path: no leading '/', no empty, '.' or '..'
 * component, length limits. ST_EUNSAFE naming the path. "" is the root. */
int st_path_check(const char *path, st_error *err);

/* Checks every invariant of docs/FORMAT.md: sorted unique paths, root first,
 * parents are directories, sane types, sizes equal to chunk sums, hardlink
 * targets are regular files of this layer. ST_EFORMAT or ST_EUNSAFE. */
int st_layer_index_validate(const st_layer_index *idx, st_error *err);

/* Validates and serialises; *out malloc'd. */
int st_layer_index_encode(const st_layer_index *idx, uint8_t **out, size_t *len, st_error *err);
/* Parses and validates; ST_EFORMAT for malformed bytes, ST_EVERSION for an
 * unknown version. */
int st_layer_index_decode(st_layer_index **out, const uint8_t *data, size_t len, st_error *err);

/* Encodes, stores (kind index) and flushes; digest_out is the layer digest. */
int st_layer_index_save(st_store *s, const st_layer_index *idx, st_digest *digest_out,
                        st_error *err);
/* Loads, verifies and decodes the index with the given digest. Errors name
 * the layer digest. */
int st_layer_index_load(st_layer_index **out, st_store *s, const st_digest *d, st_error *err);

/* What differs between two entries of the same path. */
enum {
  ST_DIFF_TYPE = 1 << 0,
  ST_DIFF_CONTENT = 1 << 1,
  ST_DIFF_MODE = 1 << 2,
  ST_DIFF_OWNER = 1 << 3,
  ST_DIFF_MTIME = 1 << 4,
  ST_DIFF_TARGET = 1 << 5,
  ST_DIFF_XATTRS = 1 << 6,
};
/* Called for each path in either index, in path order: a only (removed),
 * b only (added), or both with a non-zero change mask. Non-zero stops. */
typedef int (*st_diff_cb)(const st_entry *a, const st_entry *b, unsigned changes, void *ud);
int st_layer_index_diff(const st_layer_index *a, const st_layer_index *b, st_diff_cb cb,
                        void *ud);
