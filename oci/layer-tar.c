/* SPDX-License-Identifier: Apache-2.0 */
/* A strata layer as an OCI layer tar: libarchive writes PAX tar entries
 * through our callback, which hashes the tar (diff_id), compresses it (block-
 * parallel gzip of gzip-blocks.c, or zstd) and hashes and writes the blob. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "fs.h"
#include "oci.h"

#define OUT_BUF (256u << 10)

struct sink {
  st_oci_compression comp;
  int fd;
  st_hasher *tar_h, *blob_h;
  uint64_t tar_size, size;
  st_oci_gzip *gz;
  ZSTD_CStream *zs;
  uint8_t *out;
  int write_errno;
  st_error err; /* first error of the callback */
  bool failed;
};

static int emit(struct sink *k, const uint8_t *p, size_t n) {
  if (!n)
    return 0;
  st_hasher_update(k->blob_h, p, n);
  k->size += n;
  int rc = st_write_all(k->fd, p, n);
  if (rc < 0) {
    k->write_errno = -rc;
    return -1;
  }
  return 0;
}

static int gz_out(void *ud, const uint8_t *p, size_t n) {
  return emit(ud, p, n);
}

/* Compresses n bytes (finish: flush and end the stream). */
static int compress_some(struct sink *k, const void *data, size_t n, bool finish) {
  if (k->comp == ST_OCI_GZIP)
    return finish ? st_oci_gzip_finish(k->gz) : st_oci_gzip_write(k->gz, data, n);
  ZSTD_inBuffer in = {data, n, 0};
  for (;;) {
    ZSTD_outBuffer ob = {k->out, OUT_BUF, 0};
    size_t r = ZSTD_compressStream2(k->zs, &ob, &in, finish ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(r))
      return -1;
    if (emit(k, k->out, ob.pos) < 0)
      return -1;
    if (finish ? r == 0 : in.pos == in.size)
      return 0;
  }
}

static la_ssize_t sink_write(struct archive *a, void *ud, const void *buf, size_t n) {
  struct sink *k = ud;
  st_hasher_update(k->tar_h, buf, n);
  k->tar_size += n;
  if (compress_some(k, buf, n, false) < 0) {
    archive_set_error(a, k->write_errno ? k->write_errno : EIO, "compress or write failed");
    return -1;
  }
  return (la_ssize_t)n;
}

static int sink_init(struct sink *k, st_oci_compression c, st_oci_gzip_pool *gp, int fd,
                     st_error *err) {
  *k = (struct sink){.comp = c, .fd = fd};
  k->tar_h = st_hasher_new();
  k->blob_h = st_hasher_new();
  k->out = malloc(OUT_BUF);
  if (!k->tar_h || !k->blob_h || !k->out)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  if (c == ST_OCI_GZIP)
    return st_oci_gzip_new(&k->gz, gp, gz_out, k, err);
  k->zs = ZSTD_createCStream();
  if (!k->zs || ZSTD_isError(ZSTD_CCtx_setParameter(k->zs, ZSTD_c_compressionLevel, 3)))
    return st_error_set(err, ST_ENOMEM, "zstd init failed");
  return ST_OK;
}

static void sink_free(struct sink *k) {
  st_oci_gzip_free(k->gz);
  st_hasher_free(k->tar_h);
  st_hasher_free(k->blob_h);
  ZSTD_freeCStream(k->zs);
  free(k->out);
}

/* ---- entries ---- */

static int write_data(struct archive *a, st_store *s, const st_entry *e, st_error *err) {
  uint64_t done = 0;
  for (size_t i = 0; i < e->n_chunks; i++) {
    uint8_t *data = NULL;
    size_t n;
    int rc = st_store_get(s, ST_KIND_CHUNK, &e->chunks[i].digest, &data, &n, err);
    if (rc < 0)
      return st_error_prefix(err, "/%s", e->path);
    la_ssize_t w = archive_write_data(a, data, n);
    free(data);
    if (w < 0 || (size_t)w != n)
      return st_error_set(err, ST_EIO, "/%s: %s", e->path, archive_error_string(a));
    done += n;
  }
  if (done != e->size)
    return st_error_set(err, ST_ECORRUPT, "/%s: content size does not match its chunks",
                        e->path);
  return ST_OK;
}

static int put_header(struct archive *a, struct archive_entry *ae, const char *path,
                      st_error *err) {
  if (archive_write_header(a, ae) < ARCHIVE_WARN)
    return st_error_set(err, ST_EIO, "tar entry /%s: %s", path, archive_error_string(a));
  return ST_OK;
}

/* An empty marker file (whiteout or opaque marker) at name. */
static int put_marker(struct archive *a, struct archive_entry *ae, const char *name,
                      const st_entry *e, st_error *err) {
  archive_entry_clear(ae);
  archive_entry_set_pathname(ae, name);
  archive_entry_set_filetype(ae, AE_IFREG);
  archive_entry_set_perm(ae, 0);
  archive_entry_set_size(ae, 0);
  archive_entry_set_mtime(ae, e->mtime, 0);
  return put_header(a, ae, name, err);
}

static int put_entry(struct archive *a, struct archive_entry *ae, st_store *s, const st_entry *e,
                     st_error *err) {
  char name[ST_PATH_MAX + 32];
  archive_entry_clear(ae);
  if (e->type == ST_ENTRY_WHITEOUT) {
    const char *sl = strrchr(e->path, '/');
    int dl = sl ? (int)(sl - e->path) + 1 : 0;
    snprintf(name, sizeof name, "%.*s.wh.%s", dl, e->path, e->path + dl);
    return put_marker(a, ae, name, e, err);
  }
  snprintf(name, sizeof name, "%s%s", e->path, e->type == ST_ENTRY_DIR ? "/" : "");
  archive_entry_set_pathname(ae, name);
  archive_entry_set_perm(ae, e->mode & 07777);
  archive_entry_set_uid(ae, e->uid);
  archive_entry_set_gid(ae, e->gid);
  archive_entry_set_mtime(ae, e->mtime, 0);
  for (size_t i = 0; i < e->n_xattrs; i++)
    archive_entry_xattr_add_entry(ae, e->xattrs[i].name, e->xattrs[i].value, e->xattrs[i].len);
  switch (e->type) {
  case ST_ENTRY_DIR: archive_entry_set_filetype(ae, AE_IFDIR); break;
  case ST_ENTRY_SYMLINK:
    archive_entry_set_filetype(ae, AE_IFLNK);
    archive_entry_set_symlink(ae, e->target);
    break;
  case ST_ENTRY_HARDLINK:
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_hardlink(ae, e->target);
    archive_entry_set_size(ae, 0);
    break;
  default:
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_size(ae, (la_int64_t)e->size);
    break;
  }
  int rc = put_header(a, ae, e->path, err);
  if (rc == ST_OK && e->type == ST_ENTRY_REGULAR)
    rc = write_data(a, s, e, err);
  if (rc == ST_OK && e->type == ST_ENTRY_DIR && e->opaque) {
    snprintf(name, sizeof name, "%s/.wh..wh..opq", e->path);
    rc = put_marker(a, ae, name, e, err);
  }
  return rc;
}

int st_oci_layer_write(st_store *s, const st_layer_index *idx, st_oci_compression c,
                       st_oci_gzip_pool *gz, int fd, st_oci_blob_info *out, st_error *err) {
  struct sink k;
  int rc = sink_init(&k, c, gz, fd, err);
  struct archive *a = rc == ST_OK ? archive_write_new() : NULL;
  struct archive_entry *ae = a ? archive_entry_new() : NULL;
  if (rc == ST_OK && !ae)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  /* xattrs as SCHILY.xattr records only (GNU tar's and the OCI tools'),
   * not also as LIBARCHIVE.xattr: readers would see each twice */
  if (rc == ST_OK && (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
                      archive_write_set_format_option(a, "pax", "xattrheader", "SCHILY") !=
                          ARCHIVE_OK ||
                      archive_write_set_bytes_per_block(a, 512) != ARCHIVE_OK ||
                      archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
                      archive_write_open2(a, &k, NULL, sink_write, NULL, NULL) != ARCHIVE_OK))
    rc = st_error_set(err, ST_EIO, "tar writer: %s", archive_error_string(a));
  size_t n = st_layer_index_count(idx);
  for (size_t i = 0; rc == ST_OK && i < n; i++) {
    const st_entry *e = st_layer_index_entry(idx, i);
    if (e->path[0]) /* the root's metadata is the runtime's */
      rc = put_entry(a, ae, s, e, err);
  }
  if (rc == ST_OK && archive_write_close(a) != ARCHIVE_OK)
    rc = st_error_set(err, ST_EIO, "tar writer: %s", archive_error_string(a));
  if (rc == ST_OK && compress_some(&k, NULL, 0, true) < 0)
    rc = k.write_errno ? st_error_errno(err, k.write_errno, "write layer blob")
                       : st_error_set(err, ST_EIO, "compression failed");
  if (rc == ST_OK) {
    st_hasher_final(k.tar_h, &out->diff_id);
    st_hasher_final(k.blob_h, &out->digest);
    out->size = k.size;
    out->tar_size = k.tar_size;
  }
  if (ae)
    archive_entry_free(ae);
  if (a)
    archive_write_free(a);
  sink_free(&k);
  return rc;
}
