/* SPDX-License-Identifier: Apache-2.0 */
/* Private to oci/tarball.c, oci/layout.c and oci/import.c: image tarballs
 * read in place, blobs read as streams (from a layout directory or a
 * tarball member) and the layout over a tarball. */
#pragma once

#include <archive.h>

#include "oci.h"

/* ---- tarballs (oci/tarball.c) ---- */

typedef struct st_oci_tar st_oci_tar;
/* Indexes the tarball at path (plain or compressed) in one pass over its
 * headers. Regular members are kept by name ("./" and empty components
 * dropped); symlinks and hardlinks are aliases of the member they lead to;
 * directories and other types are ignored. Absolute names and names or
 * link targets leaving the tarball are ST_EUNSAFE, a name given twice or a
 * damaged tarball ST_EFORMAT; errors name the tarball and the member. */
int st_oci_tar_open(st_oci_tar **out, const char *path, st_error *err);
void st_oci_tar_free(st_oci_tar *t);
ST_DEFINE_FREEP(st_oci_tar, st_oci_tar_free)
const char *st_oci_tar_path(const st_oci_tar *t);
/* Whether name leads to a regular member; *size (nullable) gets its size. */
bool st_oci_tar_has(const st_oci_tar *t, const char *name, uint64_t *size);
/* Reads member name whole (at most max bytes; NUL-terminated, *out
 * malloc'd). ST_ENOENT when there is no such member. */
int st_oci_tar_read(const st_oci_tar *t, const char *name, size_t max, uint8_t **out,
                    size_t *len, st_error *err);

/* A member being read. */
typedef struct st_oci_tar_stream st_oci_tar_stream;
/* *size gets the member's size from its header. */
int st_oci_tar_stream_open(st_oci_tar_stream **out, const st_oci_tar *t, const char *name,
                           uint64_t *size, st_error *err);
/* The next bytes (*buf valid until the next call); *len 0 at the end.
 * ST_EFORMAT (detail only) for a damaged tarball. */
int st_oci_tar_stream_next(st_oci_tar_stream *s, const void **buf, size_t *len,
                           st_error *err);
void st_oci_tar_stream_free(st_oci_tar_stream *s);
ST_DEFINE_FREEP(st_oci_tar_stream, st_oci_tar_stream_free)

/* ---- blobs read as streams (oci/import.c) ---- */

typedef struct st_oci_blob_reader st_oci_blob_reader;
/* Opens dirfd/rel (dirfd >= 0) or else member rel of t. Every byte read is
 * hashed; want_size (-1: unknown) is checked against the file or member
 * size before anything is read (ST_ECORRUPT, detail only). */
int st_oci_blob_reader_open(st_oci_blob_reader **out, int dirfd, const st_oci_tar *t,
                            const char *rel, int64_t want_size, st_error *err);
/* The next bytes (*buf valid until the next call); *len 0 at the end. */
int st_oci_blob_reader_next(st_oci_blob_reader *r, const void **buf, size_t *len,
                            st_error *err);
/* After the end: ST_ECORRUPT (detail only) unless the bytes read number
 * want_size and (want nullable) hash to want. */
int st_oci_blob_reader_check(st_oci_blob_reader *r, const st_digest *want, st_error *err);
void st_oci_blob_reader_free(st_oci_blob_reader *r);
ST_DEFINE_FREEP(st_oci_blob_reader, st_oci_blob_reader_free)

/* ---- layouts (oci/layout.c) ---- */

/* The OCI layout packed in tarball t (borrowed: it must outlive the layout). */
int st_oci_layout_open_tar(st_oci_layout **out, const st_oci_tar *t, st_error *err);
/* Opens the blob of d for streaming (its size checked against d). */
int st_oci_layout_blob_open(const st_oci_layout *l, const st_oci_desc *d,
                            st_oci_blob_reader **out, st_error *err);
