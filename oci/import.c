/* SPDX-License-Identifier: Apache-2.0 */
/* Importing an image: an OCI layout (directory or tarball) or a docker
 * archive opened as one st_oci_src, and its layers read in one pass each:
 *
 *   blob bytes --hash (digest)--> libarchive "raw" + filters (decompress)
 *              --hash (diff_id)--> libarchive tar --> entries
 *
 * Both digests are checked once the tar has been read, before any of it
 * is used. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import-private.h"

#define READ_BUF (128u << 10)

void st_oci_archive_filters(struct archive *a) {
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_bzip2(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_lzma(a);
  archive_read_support_filter_zstd(a);
  archive_read_support_filter_lz4(a);
  archive_read_support_filter_compress(a);
}

/* ---- blob readers ---- */

struct st_oci_blob_reader {
  int fd; /* a file, or -1 */
  uint8_t *buf;
  st_oci_tar_stream *ts; /* or a tarball member */
  st_hasher *h;
  int64_t want_size;
  uint64_t got;
};

void st_oci_blob_reader_free(st_oci_blob_reader *r) {
  if (!r)
    return;
  if (r->fd >= 0)
    close(r->fd);
  free(r->buf);
  st_oci_tar_stream_free(r->ts);
  st_hasher_free(r->h);
  free(r);
}

int st_oci_blob_reader_open(st_oci_blob_reader **out, int dirfd, const st_oci_tar *t,
                            const char *rel, int64_t want_size, st_error *err) {
  _cleanup_(st_oci_blob_reader_freep) st_oci_blob_reader *r = calloc(1, sizeof *r);
  if (!r)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  r->fd = -1;
  r->want_size = want_size;
  if (!(r->h = st_hasher_new()))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int64_t size;
  if (dirfd >= 0) {
    if ((r->fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC)) < 0)
      return st_error_errno(err, errno, "open %s", rel);
    struct stat st;
    if (fstat(r->fd, &st) < 0)
      return st_error_errno(err, errno, "stat %s", rel);
    if (!S_ISREG(st.st_mode))
      return st_error_set(err, ST_EINVAL, "%s: not a regular file", rel);
    if (!(r->buf = malloc(READ_BUF)))
      return st_error_set(err, ST_ENOMEM, "out of memory");
    size = st.st_size;
  } else {
    uint64_t sz;
    int rc = st_oci_tar_stream_open(&r->ts, t, rel, &sz, err);
    if (rc < 0)
      return rc;
    size = (int64_t)sz;
  }
  if (want_size >= 0 && size != want_size)
    return st_error_set(err, ST_ECORRUPT, "size %lld, its descriptor says %lld",
                        (long long)size, (long long)want_size);
  *out = ST_TAKE_PTR(r);
  return ST_OK;
}

int st_oci_blob_reader_next(st_oci_blob_reader *r, const void **buf, size_t *len,
                            st_error *err) {
  if (r->ts) {
    int rc = st_oci_tar_stream_next(r->ts, buf, len, err);
    if (rc < 0)
      return rc;
  } else {
    ssize_t n;
    do
      n = read(r->fd, r->buf, READ_BUF);
    while (n < 0 && errno == EINTR);
    if (n < 0)
      return st_error_errno(err, errno, "read");
    *buf = r->buf;
    *len = (size_t)n;
  }
  st_hasher_update(r->h, *buf, *len);
  r->got += *len;
  return ST_OK;
}

int st_oci_blob_reader_check(st_oci_blob_reader *r, const st_digest *want, st_error *err) {
  if (r->want_size >= 0 && r->got != (uint64_t)r->want_size)
    return st_error_set(err, ST_ECORRUPT, "%llu bytes read, its descriptor says %lld",
                        (unsigned long long)r->got, (long long)r->want_size);
  st_digest got;
  st_hasher_final(r->h, &got);
  if (want && !st_digest_equal(&got, want))
    return st_error_set(err, ST_ECORRUPT, "content does not match its digest");
  return ST_OK;
}

/* ---- the image ---- */

struct st_oci_src {
  char *path;
  st_oci_tar *tar;          /* nullable: a tarball */
  st_oci_layout *layout;    /* nullable: an OCI layout */
  st_oci_manifest *m;       /* with layout */
  st_docker_manifest *dm;   /* or a docker archive */
  const st_docker_image *di; /* the image of dm */
  st_oci_config *config;
  st_digest key;
};

void st_oci_src_free(st_oci_src *s) {
  if (!s)
    return;
  st_oci_config_free(s->config);
  st_oci_manifest_free(s->m);
  st_docker_manifest_free(s->dm);
  st_oci_layout_free(s->layout);
  st_oci_tar_free(s->tar);
  free(s->path);
  free(s);
}

const char *st_oci_src_path(const st_oci_src *s) { return s->path; }
const st_oci_config *st_oci_src_config(const st_oci_src *s) { return s->config; }
const st_digest *st_oci_src_key(const st_oci_src *s) { return &s->key; }

st_oci_config *st_oci_src_take_config(st_oci_src *s) { return ST_TAKE_PTR(s->config); }

size_t st_oci_src_layers(const st_oci_src *s) {
  return s->m ? s->m->n_layers : s->di->n_layers;
}

const char *st_oci_src_layer_name(const st_oci_src *s, size_t i, char *buf, size_t size) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  if (s->m)
    snprintf(buf, size, "blob sha256:%s", st_digest_hex(&s->m->layers[i].digest, hex));
  else
    snprintf(buf, size, "member %s", s->di->layers[i]);
  return buf;
}

/* The digest a docker archive member is named by: "<hex>.json" (classic
 * config files) or "blobs/sha256/<hex>" (OCI blobs). False for other names. */
static bool name_digest(const char *name, st_digest *out) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  char hex[ST_DIGEST_HEX_LEN + 1];
  size_t bl = strlen(base);
  bool blob = base - name == 13 && !strncmp(name, "blobs/sha256/", 13) &&
              bl == ST_DIGEST_HEX_LEN;
  bool json = base == name && bl == ST_DIGEST_HEX_LEN + 5 && !strcmp(base + 64, ".json");
  if (!blob && !json)
    return false;
  memcpy(hex, base, ST_DIGEST_HEX_LEN);
  hex[ST_DIGEST_HEX_LEN] = '\0';
  return st_digest_parse(out, hex, NULL) == ST_OK;
}

/* A docker reference in canonical form: "docker.io/library/" for a bare
 * name, "docker.io/" for a name without a registry, ":latest" without a
 * tag. malloc'd, NULL on OOM. */
static char *docker_norm(const char *ref) {
  const char *slash = strchr(ref, '/'), *last = strrchr(ref, '/');
  const char *tag = strrchr(last ? last : ref, ':');
  bool domain = slash && (memchr(ref, '.', (size_t)(slash - ref)) ||
                          memchr(ref, ':', (size_t)(slash - ref)) ||
                          !strncmp(ref, "localhost/", 10));
  const char *pre = domain ? "" : slash ? "docker.io/" : "docker.io/library/";
  char *out = NULL;
  if (asprintf(&out, "%s%s%s", pre, ref, tag || strchr(ref, '@') ? "" : ":latest") < 0)
    return NULL;
  return out;
}

static bool tag_matches(const char *a, const char *b) {
  _cleanup_free_ char *na = docker_norm(a), *nb = docker_norm(b);
  return na && nb && !strcmp(na, nb);
}

/* "a:1, b:2" of the RepoTags in the manifest (truncated) into buf. */
static const char *repo_tags(const st_docker_manifest *dm, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < dm->n && n + 8 < size; i++) {
    const st_docker_image *d = &dm->images[i];
    for (size_t k = 0; k < (d->n_repo_tags ? d->n_repo_tags : 1) && n + 8 < size; k++) {
      int w = snprintf(buf + n, size - n, "%s%.100s", n ? ", " : "",
                       d->n_repo_tags ? d->repo_tags[k] : "(untagged)");
      n += w > 0 ? (size_t)w : 0;
    }
  }
  if (n >= size - 8)
    snprintf(buf + size - 8, 8, ", ...");
  return buf;
}

static int docker_resolve(st_oci_src *s, const char *ref, st_error *err) {
  char names[320];
  for (size_t i = 0; i < s->dm->n && ref; i++)
    for (size_t k = 0; k < s->dm->images[i].n_repo_tags; k++)
      if (!s->di && tag_matches(s->dm->images[i].repo_tags[k], ref))
        s->di = &s->dm->images[i];
  if (!ref && s->dm->n == 1)
    s->di = &s->dm->images[0];
  else if (!ref)
    return st_error_set(err, ST_EINVAL, "docker archive %s: %zu images, say which with ref: "
                        "(%s)", s->path, s->dm->n, repo_tags(s->dm, names, sizeof names));
  if (!s->di)
    return st_error_set(err, ST_ENOENT, "docker archive %s: no image tagged %s (it has: %s)",
                        s->path, ref, repo_tags(s->dm, names, sizeof names));
  return ST_OK;
}

/* Reads and checks the config of the selected docker image. */
static int docker_config(st_oci_src *s, st_error *err) {
  const char *name = s->di->config;
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int rc = st_oci_tar_read(s->tar, name, ST_OCI_JSON_MAX, &data, &len, err);
  if (rc < 0)
    return st_error_prefix(err, "docker archive %s: config", s->path);
  st_digest named;
  st_sha256(&s->key, data, len);
  if (name_digest(name, &named) && !st_digest_equal(&named, &s->key))
    return st_error_set(err, ST_ECORRUPT, "docker archive %s: config %s: content does not "
                        "match the digest it is named by", s->path, name);
  if ((rc = st_oci_config_parse(&s->config, data, len, err)) < 0)
    return st_error_prefix(err, "docker archive %s: config %s", s->path, name);
  if (s->config->n_diff_ids != s->di->n_layers)
    return st_error_set(err, ST_EFORMAT, "docker archive %s: config %s: %zu diff_ids for %zu "
                        "layers", s->path, name, s->config->n_diff_ids, s->di->n_layers);
  for (size_t i = 0; i < s->di->n_layers; i++)
    if (!st_oci_tar_has(s->tar, s->di->layers[i], NULL))
      return st_error_set(err, ST_ENOENT, "docker archive %s: layer %zu member %s is missing",
                          s->path, i, s->di->layers[i]);
  return ST_OK;
}

static int docker_open(st_oci_src *s, const char *ref, st_error *err) {
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int rc = st_oci_tar_read(s->tar, "manifest.json", ST_OCI_JSON_MAX, &data, &len, err);
  if (rc < 0)
    return st_error_prefix(err, "docker archive %s", s->path);
  if ((rc = st_docker_manifest_parse(&s->dm, data, len, err)) < 0)
    return st_error_prefix(err, "docker archive %s: manifest.json", s->path);
  if ((rc = docker_resolve(s, ref, err)) < 0)
    return rc;
  return docker_config(s, err);
}

int st_oci_src_open(st_oci_src **out, const char *path, const char *ref, st_error *err) {
  _cleanup_(st_oci_src_freep) st_oci_src *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  struct stat st;
  if (stat(path, &st) < 0)
    return st_error_errno(err, errno, "oci %s", path);
  int rc;
  if (S_ISDIR(st.st_mode)) {
    rc = st_oci_layout_open(&s->layout, path, err);
  } else if ((rc = st_oci_tar_open(&s->tar, path, err)) < 0) {
    return rc;
  } else if (st_oci_tar_has(s->tar, "manifest.json", NULL)) {
    rc = docker_open(s, ref, err);
  } else if (st_oci_tar_has(s->tar, "oci-layout", NULL)) {
    rc = st_oci_layout_open_tar(&s->layout, s->tar, err);
  } else {
    rc = st_error_set(err, ST_EFORMAT, "tarball %s: neither manifest.json (a docker archive) "
                      "nor oci-layout (an OCI layout)", path);
  }
  if (rc == ST_OK && s->layout)
    rc = st_oci_layout_image(s->layout, ref, &s->m, &s->config, &s->key, err);
  if (rc < 0)
    return rc;
  *out = ST_TAKE_PTR(s);
  return ST_OK;
}

/* ---- layers ---- */

struct st_oci_layer_reader {
  st_oci_blob_reader *blob;
  st_digest digest; /* what the blob must hash to, if has_digest */
  bool has_digest;
  const st_digest *diff_id;
  struct archive *raw; /* the blob, decompressed */
  struct archive *tar; /* its entries */
  st_hasher *diff;
  st_error blob_err; /* why the blob could not be read */
};

void st_oci_layer_reader_free(st_oci_layer_reader *r) {
  if (!r)
    return;
  if (r->tar)
    archive_read_free(r->tar);
  if (r->raw)
    archive_read_free(r->raw);
  st_oci_blob_reader_free(r->blob);
  st_hasher_free(r->diff);
  free(r);
}

struct archive *st_oci_layer_reader_tar(st_oci_layer_reader *r) { return r->tar; }

static la_ssize_t blob_read(struct archive *a, void *ud, const void **buf) {
  st_oci_layer_reader *r = ud;
  size_t len = 0;
  if (st_oci_blob_reader_next(r->blob, buf, &len, &r->blob_err) < 0) {
    archive_set_error(a, EIO, "%s", r->blob_err.msg);
    return -1;
  }
  return (la_ssize_t)len;
}

/* The next decompressed bytes, hashed for the diff_id. */
static la_ssize_t raw_read(struct archive *a, void *ud, const void **buf) {
  st_oci_layer_reader *r = ud;
  size_t len = 0;
  la_int64_t off = 0;
  int ar = archive_read_data_block(r->raw, buf, &len, &off);
  if (ar == ARCHIVE_EOF)
    return 0;
  if (ar < ARCHIVE_WARN) {
    const char *msg = archive_error_string(r->raw);
    archive_set_error(a, archive_errno(r->raw) ? archive_errno(r->raw) : EIO, "%s",
                      msg ? msg : "damaged compressed stream");
    return -1;
  }
  st_hasher_update(r->diff, *buf, len);
  return (la_ssize_t)len;
}

static int raw_error(struct archive *a, st_error *err) {
  const char *msg = archive_error_string(a);
  return st_error_set(err, ST_EFORMAT, "%s", msg ? msg : "damaged compressed stream");
}

int st_oci_layer_reader_open(st_oci_layer_reader **out, const st_oci_src *s, size_t i,
                             st_error *err) {
  _cleanup_(st_oci_layer_reader_freep) st_oci_layer_reader *r = calloc(1, sizeof *r);
  if (!r || !(r->diff = st_hasher_new()))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc;
  if (s->m) {
    r->digest = s->m->layers[i].digest;
    r->has_digest = true;
    rc = st_oci_layout_blob_open(s->layout, &s->m->layers[i], &r->blob, err);
  } else { /* docker: blobs/sha256/<hex> members are checked against their name */
    r->has_digest = name_digest(s->di->layers[i], &r->digest);
    rc = st_oci_blob_reader_open(&r->blob, -1, s->tar, s->di->layers[i], -1, err);
  }
  if (rc < 0)
    return rc;
  r->diff_id = &s->config->diff_ids[i];
  if (!(r->raw = archive_read_new()) || !(r->tar = archive_read_new()))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  st_oci_archive_filters(r->raw);
  archive_read_support_format_raw(r->raw);
  archive_read_support_format_tar(r->tar);
  struct archive_entry *ae;
  if (archive_read_open(r->raw, r, NULL, blob_read, NULL) != ARCHIVE_OK)
    return raw_error(r->raw, err);
  int ar = archive_read_next_header(r->raw, &ae);
  if (ar == ARCHIVE_EOF)
    return st_error_set(err, ST_EFORMAT, "empty blob");
  if (ar < ARCHIVE_WARN)
    return raw_error(r->raw, err);
  if (archive_read_open(r->tar, r, NULL, raw_read, NULL) != ARCHIVE_OK)
    return raw_error(r->tar, err);
  *out = ST_TAKE_PTR(r);
  return ST_OK;
}

int st_oci_layer_reader_finish(st_oci_layer_reader *r, st_error *err) {
  /* what follows the tar's end marker (padding) is part of the tar */
  for (;;) {
    const void *buf;
    la_ssize_t n = raw_read(r->tar, r, &buf);
    if (n < 0)
      return raw_error(r->tar, err);
    if (n == 0)
      break;
  }
  for (;;) { /* and of the blob, after the compressed stream */
    const void *buf;
    size_t len = 0;
    int rc = st_oci_blob_reader_next(r->blob, &buf, &len, err);
    if (rc < 0)
      return rc;
    if (!len)
      break;
  }
  int rc = st_oci_blob_reader_check(r->blob, r->has_digest ? &r->digest : NULL, err);
  if (rc < 0)
    return rc;
  st_digest got;
  st_hasher_final(r->diff, &got);
  if (!st_digest_equal(&got, r->diff_id)) {
    char g[ST_DIGEST_HEX_LEN + 1], w[ST_DIGEST_HEX_LEN + 1];
    return st_error_set(err, ST_ECORRUPT, "uncompressed tar sha256:%s does not match its "
                        "diff_id sha256:%s", st_digest_hex(&got, g),
                        st_digest_hex(r->diff_id, w));
  }
  return ST_OK;
}
