/* SPDX-License-Identifier: Apache-2.0 */
/* Reading OCI image layouts (a directory, or packed in a tarball):
 * oci-layout, index.json, blobs verified against their descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"
#include "import-private.h"

struct st_oci_layout {
  char *path;
  int dirfd;             /* a directory, or -1 for a layout in tar */
  const st_oci_tar *tar; /* borrowed, nullable */
  st_oci_index *index;
};

void st_oci_layout_free(st_oci_layout *l) {
  if (!l)
    return;
  if (l->dirfd >= 0)
    close(l->dirfd);
  st_oci_index_free(l->index);
  free(l->path);
  free(l);
}

const char *st_oci_layout_path(const st_oci_layout *l) { return l->path; }

/* Reads the file rel of the layout (at most max bytes). */
static int layout_read(const st_oci_layout *l, const char *rel, size_t max, uint8_t **out,
                       size_t *len, st_error *err) {
  if (l->tar)
    return st_oci_tar_read(l->tar, rel, max, out, len, err);
  return st_read_file_at(l->dirfd, rel, max, out, len, err);
}

static int check_oci_layout(st_oci_layout *l, st_error *err) {
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int rc = layout_read(l, "oci-layout", 4096, &data, &len, err);
  if (rc < 0)
    return st_error_prefix(err, "OCI layout %s", l->path);
  const char *key = "\"imageLayoutVersion\"";
  char *p = strstr((char *)data, key);
  if (p)
    p += strlen(key);
  while (p && (*p == ' ' || *p == ':' || *p == '\t'))
    p++;
  if (!p || strncmp(p, "\"1.", 3))
    return st_error_set(err, ST_EFORMAT, "OCI layout %s: oci-layout: no imageLayoutVersion 1.x",
                        l->path);
  return ST_OK;
}

/* Checks oci-layout and parses index.json. */
static int layout_load(st_oci_layout *l, st_error *err) {
  int rc = check_oci_layout(l, err);
  if (rc < 0)
    return rc;
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  if ((rc = layout_read(l, "index.json", ST_OCI_JSON_MAX, &data, &len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s", l->path);
  if ((rc = st_oci_index_parse(&l->index, data, len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s: index.json", l->path);
  return ST_OK;
}

/* A layout over dirfd (consumed) or t (borrowed). */
static int layout_new(st_oci_layout **out, const char *path, int dirfd, const st_oci_tar *t,
                      st_error *err) {
  _cleanup_(st_oci_layout_freep) st_oci_layout *l = calloc(1, sizeof *l);
  if (!l || !(l->path = strdup(path))) {
    if (l)
      l->dirfd = -1;
    if (dirfd >= 0)
      close(dirfd);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  l->dirfd = dirfd;
  l->tar = t;
  int rc = layout_load(l, err);
  if (rc < 0)
    return rc;
  *out = ST_TAKE_PTR(l);
  return ST_OK;
}

int st_oci_layout_open(st_oci_layout **out, const char *path, st_error *err) {
  int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return st_error_errno(err, errno, "OCI layout %s", path);
  return layout_new(out, path, dirfd, NULL, err);
}

int st_oci_layout_open_tar(st_oci_layout **out, const st_oci_tar *t, st_error *err) {
  return layout_new(out, st_oci_tar_path(t), -1, t, err);
}

/* "a, b, c" of the ref names in the index (at most ~300 bytes) into buf. */
static const char *ref_names(const st_oci_layout *l, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < l->index->n && n + 8 < size; i++) {
    const char *name = l->index->manifests[i].ref_name;
    int k = snprintf(buf + n, size - n, "%s%.100s", i ? ", " : "", name ? name : "(unnamed)");
    n += k > 0 ? (size_t)k : 0;
  }
  if (n >= size - 8)
    snprintf(buf + size - 8, 8, ", ...");
  return buf;
}

int st_oci_layout_resolve(const st_oci_layout *l, const char *ref, const st_oci_desc **out,
                          st_error *err) {
  const st_oci_desc *found = NULL;
  char names[320];
  for (size_t i = 0; i < l->index->n; i++) {
    const st_oci_desc *d = &l->index->manifests[i];
    if (ref && (!d->ref_name || strcmp(d->ref_name, ref)))
      continue;
    if (found && !ref)
      return st_error_set(err, ST_EINVAL, "OCI layout %s: %zu manifests, say which with ref: "
                          "(%s)", l->path, l->index->n, ref_names(l, names, sizeof names));
    found = d;
  }
  if (!found && !ref)
    return st_error_set(err, ST_ENOENT, "OCI layout %s: no manifest", l->path);
  if (!found)
    return st_error_set(err, ST_ENOENT, "OCI layout %s: no manifest named %s (it has: %s)",
                        l->path, ref, ref_names(l, names, sizeof names));
  if (!strcmp(found->media_type, ST_OCI_MT_INDEX))
    return st_error_set(err, ST_EUNSUPPORTED, "OCI layout %s: %s is a nested image index",
                        l->path, ref ? ref : "the manifest");
  if (strcmp(found->media_type, ST_OCI_MT_MANIFEST) &&
      strcmp(found->media_type, ST_DOCKER_MT_MANIFEST))
    return st_error_set(err, ST_EFORMAT, "OCI layout %s: unsupported manifest type %.100s",
                        l->path, found->media_type);
  *out = found;
  return ST_OK;
}

int st_oci_layout_blob_open(const st_oci_layout *l, const st_oci_desc *d,
                            st_oci_blob_reader **out, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], rel[128];
  snprintf(rel, sizeof rel, "blobs/sha256/%s", st_digest_hex(&d->digest, hex));
  if (d->size > INT64_MAX)
    return st_error_set(err, ST_EFORMAT, "size %llu out of range", (unsigned long long)d->size);
  return st_oci_blob_reader_open(out, l->dirfd, l->tar, rel, (int64_t)d->size, err);
}

int st_oci_blob_read(const st_oci_layout *l, const st_oci_desc *d, size_t max, uint8_t **out,
                     size_t *len, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], rel[128];
  st_digest_hex(&d->digest, hex);
  snprintf(rel, sizeof rel, "blobs/sha256/%s", hex);
  if (d->size > max)
    return st_error_set(err, ST_ELIMIT, "OCI layout %s: blob sha256:%s: size %llu over %zu",
                        l->path, hex, (unsigned long long)d->size, max);
  uint8_t *data = NULL;
  size_t n;
  int rc = layout_read(l, rel, max, &data, &n, err);
  if (rc < 0)
    return st_error_prefix(err, "OCI layout %s: blob sha256:%s", l->path, hex);
  st_digest got;
  st_sha256(&got, data, n);
  if (n != d->size || !st_digest_equal(&got, &d->digest)) {
    free(data);
    return st_error_set(err, ST_ECORRUPT, "OCI layout %s: blob sha256:%s: %s", l->path, hex,
                        n != d->size ? "size does not match its descriptor"
                                     : "content does not match its digest");
  }
  *out = data;
  *len = n;
  return ST_OK;
}

int st_oci_layout_image(const st_oci_layout *l, const char *ref, st_oci_manifest **m_out,
                        st_oci_config **c_out, st_digest *manifest_digest, st_error *err) {
  const st_oci_desc *md = NULL;
  int rc = st_oci_layout_resolve(l, ref, &md, err);
  if (rc < 0)
    return rc;
  char hex[ST_DIGEST_HEX_LEN + 1];
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  if ((rc = st_oci_blob_read(l, md, ST_OCI_JSON_MAX, &data, &len, err)) < 0)
    return rc;
  _cleanup_(st_oci_manifest_freep) st_oci_manifest *m = NULL;
  if ((rc = st_oci_manifest_parse(&m, data, len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s: manifest sha256:%s", l->path,
                           st_digest_hex(&md->digest, hex));
  free(data);
  data = NULL;
  if ((rc = st_oci_blob_read(l, &m->config, ST_OCI_JSON_MAX, &data, &len, err)) < 0)
    return rc;
  _cleanup_(st_oci_config_freep) st_oci_config *c = NULL;
  if ((rc = st_oci_config_parse(&c, data, len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s: config sha256:%s", l->path,
                           st_digest_hex(&m->config.digest, hex));
  st_digest_hex(&m->config.digest, hex);
  if (c->n_diff_ids != m->n_layers)
    return st_error_set(err, ST_EFORMAT, "OCI layout %s: config sha256:%s: %zu diff_ids for %zu "
                        "layers", l->path, hex, c->n_diff_ids, m->n_layers);
  if (manifest_digest)
    *manifest_digest = md->digest;
  *m_out = ST_TAKE_PTR(m);
  *c_out = ST_TAKE_PTR(c);
  return ST_OK;
}
