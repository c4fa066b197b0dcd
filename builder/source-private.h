/* SPDX-License-Identifier: Apache-2.0 */
/* Private to builder/source-*.c: the hashing file reader libarchive reads
 * through, the archive-entry feeder shared by archive and deb sources, and
 * destination normalisation. */
#pragma once

#include <archive.h>
#include <stdbool.h>
#include <stdint.h>

#include "dset.h"
#include "source.h"

/* A file libarchive reads through our callbacks. However libarchive reads
 * and seeks, every byte of the file reaches hasher once and in order: bytes
 * skipped by a forward seek are hashed before the next read, and
 * st_src_file_hash_rest() hashes what was never read. */
typedef struct {
  int fd;
  const char *path; /* borrowed */
  st_hasher *hasher; /* nullable, borrowed */
  uint8_t *buf;     /* owned */
  size_t buf_size;
  int64_t pos, hashed, size;
  int read_errno;   /* errno of a failed read, for the error message */
} st_src_file;

int st_src_file_open(st_src_file *f, const char *path, st_hasher *hasher, st_error *err);
void st_src_file_close(st_src_file *f);
/* Opens a over f (seekable: zip reads its central directory). Returns a
 * libarchive status. */
int st_src_file_attach(struct archive *a, st_src_file *f, bool seekable);
/* Hashes the bytes not hashed yet, up to the end of the file. */
int st_src_file_hash_rest(st_src_file *f, st_error *err);
/* The error of a failed libarchive call on a reading f: errno-based if a
 * read failed, else ST_EFORMAT with libarchive's message. */
int st_src_archive_error(struct archive *a, const st_src_file *f, const char *what,
                         st_error *err);

/* A new reader with the supported filters; all_formats adds tar, cpio, zip
 * and ar (else only tar). NULL on OOM. */
struct archive *st_src_archive_new(bool all_formats);

typedef struct {
  st_layer_writer *w;
  const char *what; /* "archive /x/a.tar", prefix of every error */
  const char *dest; /* normalised, relative ("" = root) */
  unsigned strip;
  int64_t mtime;
  const st_src_file *file; /* nullable: the underlying file, for read errors */
  bool oci_whiteouts; /* NAME/.wh.X is a whiteout of NAME/X, NAME/.wh..wh..opq makes
                         NAME opaque (OCI layers) */
  st_dset *dirs;      /* nullable: gets the SHA-256 of every directory path the
                         archive names itself (not implied ones) */
} st_feed;

/* Feeds every entry of the opened archive a into the writer (see
 * st_source_archive for the rules). */
int st_src_feed_archive(struct archive *a, const st_feed *fd, st_error *err);

/* Normalises a destination ("/opt//x/" -> "opt/x", NULL or "/" -> "") into
 * *out (malloc'd). ST_EUNSAFE for '.' or '..' components. */
int st_src_dest(const char *dest, char **out, st_error *err);
