/* SPDX-License-Identifier: Apache-2.0 */
/* Reading OCI image layout directories: oci-layout, index.json, blobs
 * verified against their descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"
#include "oci.h"

struct st_oci_layout {
  char *path;
  int dirfd;
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

static int check_oci_layout(st_oci_layout *l, st_error *err) {
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int rc = st_read_file_at(l->dirfd, "oci-layout", 4096, &data, &len, err);
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

int st_oci_layout_open(st_oci_layout **out, const char *path, st_error *err) {
  _cleanup_(st_oci_layout_freep) st_oci_layout *l = calloc(1, sizeof *l);
  if (!l || !(l->path = strdup(path)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  l->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (l->dirfd < 0)
    return st_error_errno(err, errno, "OCI layout %s", path);
  int rc = check_oci_layout(l, err);
  if (rc < 0)
    return rc;
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  if ((rc = st_read_file_at(l->dirfd, "index.json", ST_OCI_JSON_MAX, &data, &len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s", path);
  if ((rc = st_oci_index_parse(&l->index, data, len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s: index.json", path);
  *out = ST_TAKE_PTR(l);
  return ST_OK;
}

int st_oci_layout_resolve(const st_oci_layout *l, const char *ref, const st_oci_desc **out,
                          st_error *err) {
  const st_oci_desc *found = NULL;
  for (size_t i = 0; i < l->index->n; i++) {
    const st_oci_desc *d = &l->index->manifests[i];
    if (ref && (!d->ref_name || strcmp(d->ref_name, ref)))
      continue;
    if (found && !ref)
      return st_error_set(err, ST_EINVAL, "OCI layout %s: %zu manifests, say which with ref:",
                          l->path, l->index->n);
    found = d;
  }
  if (!found)
    return st_error_set(err, ST_ENOENT, "OCI layout %s: %s%s", l->path,
                        ref ? "no manifest named " : "no manifest", ref ? ref : "");
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

char *st_oci_blob_path(const st_oci_layout *l, const st_digest *d) {
  char hex[ST_DIGEST_HEX_LEN + 1], *p = NULL;
  if (asprintf(&p, "%s/blobs/sha256/%s", l->path, st_digest_hex(d, hex)) < 0)
    return NULL;
  return p;
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
  int rc = st_read_file_at(l->dirfd, rel, max, &data, &n, err);
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
