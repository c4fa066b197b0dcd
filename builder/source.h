/* SPDX-License-Identifier: Apache-2.0 */
/* Layer sources: a directory tree, a single file, an archive (tar in any of
 * the usual compressions, zip/wheel, cpio, ar) or a Debian package, fed into
 * a layer writer under a destination path. Archives are streamed, never
 * extracted to disk. Also a stat-only digest of a tree for build cache keys. */
#pragma once

#include <stdint.h>

#include "digest.h"
#include "error.h"
#include "layer-writer.h"
#include "oci.h"

typedef enum {
  ST_OWNER_ROOT = 0, /* uid/gid 0 */
  ST_OWNER_SOURCE,   /* the source file's own */
  ST_OWNER_FIXED,    /* opts uid/gid */
} st_owner_mode;

typedef struct {
  const char *dest;    /* nullable: absolute path inside the layer where the
                          source lands; NULL = "/". A leading '/' is optional,
                          repeated and trailing '/' are ignored; a '.' or '..'
                          component is ST_EUNSAFE. */
  unsigned strip;      /* archive, deb: leading path components to drop */
  st_owner_mode owner; /* dir, file; archives and debs keep their own */
  uint32_t uid, gid;   /* with ST_OWNER_FIXED */
  int64_t mtime;       /* every entry gets this (0 or SOURCE_DATE_EPOCH) */
  int has_mode;        /* file: use mode instead of the source's bits */
  uint32_t mode;
  unsigned threads;    /* oci: chunk workers for the layers it reads */
  st_hasher *hasher;   /* nullable: gets every byte of the input file, once
                          and in order (file, archive, deb), so that its
                          digest is the SHA-256 of the input file */
} st_source_opts;

/* Packs the tree at dir under o->dest: dir itself becomes the dest
 * directory entry (with dir's mode), everything below keeps its relative
 * path. Owners per o->owner, mtimes o->mtime. Symlinks are not followed;
 * device nodes, FIFOs and sockets are skipped with a warning. Errors name
 * the path: I/O errors by errno, ST_EUNSAFE for an unsafe dest. */
int st_source_dir(st_layer_writer *w, const char *dir, const st_source_opts *o, st_error *err);

/* Adds the regular file at path (symlinks followed) as one regular entry at
 * o->dest, which is the file's full path in the layer (not "/": ST_EINVAL).
 * Mode from o->mode when has_mode, else the file's; owner per o->owner. The
 * content also goes through o->hasher. ST_EINVAL if path is not a regular
 * file; I/O errors name path. */
int st_source_file(st_layer_writer *w, const char *path, const st_source_opts *o, st_error *err);

/* Streams the archive at path into w under o->dest: regular files,
 * directories, symlinks (targets kept as they are), hardlinks, modes with
 * set-id bits, uid/gid and xattrs of the archive; mtimes are o->mtime.
 * Names lose a leading "./" and o->strip leading components (entries with
 * no more components are skipped, like tar --strip-components).
 * Errors name the archive and, where there is one, the entry:
 *   ST_EUNSAFE  absolute name, '..' component, hardlink target escaping;
 *   ST_EFORMAT  not an archive, truncated or corrupt (libarchive's message);
 *   ST_EIO etc. reading the file.
 * Device nodes, FIFOs and sockets are skipped with a warning. On failure w
 * holds part of the archive: the caller drops it. Directories the archive
 * implies but does not contain get the writer's dir defaults. */
int st_source_archive(st_layer_writer *w, const char *path, const st_source_opts *o,
                      st_error *err);

/* Streams the data.tar member of the Debian package at path into w exactly
 * like st_source_archive, and returns the text of the package's control
 * file in *control_out (nullable; malloc'd, owned by caller, ending in
 * exactly one newline; written only on success). ST_EFORMAT, naming the
 * package and the member, for a bad debian-binary, a missing data.tar or
 * control file, or a damaged member; ST_EUNSAFE as for archives. */
int st_source_deb(st_layer_writer *w, const char *path, const st_source_opts *o,
                  char **control_out, st_error *err);

/* Lays the image `ref` (nullable: the only one) of the OCI image layout
 * (a directory or a tarball) or docker archive at path under o->dest: its
 * layers are read bottom first (tar, tar+gzip, tar+zstd), each blob's size
 * and SHA-256 checked against its descriptor and the SHA-256 of its
 * uncompressed tar against the config's diff_id while it streams, OCI whiteouts (.wh.NAME) and opaque markers
 * (.wh..wh..opq) applied, and the composed tree added to w (owners, modes,
 * xattrs, hardlinks kept; mtimes o->mtime). Chunks go to s. Errors name the
 * layout, the layer's blob and the entry: ST_EFORMAT (malformed JSON or tar,
 * truncated stream), ST_ECORRUPT (digest, diff_id or size mismatch), ST_EUNSAFE
 * (absolute or '..' names, a path below a symlink), ST_ENOENT (no such
 * ref). On failure w holds part of the image: the caller drops it. */
int st_source_oci(st_layer_writer *w, st_store *s, const char *path, const char *ref,
                  const st_source_opts *o, st_error *err);
/* The config of that image (owned by caller) and key (nullable) the digest
 * that names its content (st_oci_src_key). */
int st_source_oci_config(const char *path, const char *ref, st_oci_config **out,
                         st_digest *key, st_error *err);

/* A digest of the tree at dir from lstat alone (contents are not read):
 * every path with its type, permission bits, uid, gid, size, mtime in ns and
 * symlink target, in a canonical order. Any change to one of these changes
 * the digest. Errors name the path. */
int st_source_dir_digest(const char *dir, st_digest *out, st_error *err);
