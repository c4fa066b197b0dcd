/* SPDX-License-Identifier: Apache-2.0 */
/* OCI image sources: the layers of one manifest of an OCI image layout are
 * streamed (tar, tar+gzip, tar+zstd through libarchive, every blob hashed as
 * it is read and checked against its descriptor), each into a layer of its
 * own with OCI whiteouts as strata whiteouts and opaque directories; the
 * layers are composed in order and the resulting tree is laid under dest. */
#include <archive.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "compose.h"
#include "log.h"
#include "oci.h"
#include "source-private.h"

/* A layer may replace a lower symlink (or file) by a directory only by
 * naming that directory itself: a path below a lower symlink that the layer
 * merely implies would, in a container runtime, be written through the
 * symlink, possibly out of the root. Refused. */
static int check_parents(const st_layer_index *layer, const st_layer_index *lower,
                         const st_dset *dirs, const char *what, st_error *err) {
  size_t n = st_layer_index_count(layer);
  for (size_t i = 0; lower && i < n; i++) {
    const char *p = st_layer_index_entry(layer, i)->path;
    char anc[ST_PATH_MAX + 1];
    for (const char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
      size_t len = (size_t)(s - p);
      memcpy(anc, p, len);
      anc[len] = '\0';
      const st_entry *le = st_layer_index_find(lower, anc);
      if (!le || le->type == ST_ENTRY_DIR)
        continue;
      st_digest d;
      st_sha256(&d, anc, len);
      if (!st_dset_get(dirs, &d, NULL))
        return st_error_set(err, ST_EUNSAFE, "%s: entry '%s': '%s' is a %s in a lower layer; "
                            "writing through it is refused", what, p, anc,
                            le->type == ST_ENTRY_SYMLINK ? "symlink" : "file");
    }
  }
  return ST_OK;
}

/* Streams one layer blob into a new layer (not stored: it only feeds the
 * composition). lower: the layers composed so far, so that a path under a
 * lower symlink is refused instead of written through it. */
static int read_layer(st_store *s, const st_oci_layout *l, const st_oci_desc *d, size_t li,
                      const st_layer_index *lower, const st_source_opts *o,
                      st_layer_index **out, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], what[PATH_MAX + 160];
  st_digest_hex(&d->digest, hex);
  snprintf(what, sizeof what, "oci %s: layer %zu blob sha256:%s", st_oci_layout_path(l), li, hex);
  _cleanup_free_ char *path = st_oci_blob_path(l, &d->digest);
  st_hasher *h = st_hasher_new();
  if (!path || !h) {
    st_hasher_free(h);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  st_src_file f;
  int rc = st_src_file_open(&f, path, h, err);
  if (rc < 0) {
    st_hasher_free(h);
    return st_error_prefix(err, "%s", what);
  }
  st_layer_writer *w = NULL;
  struct archive *a = NULL;
  st_dset *dirs = st_dset_new();
  if (!dirs)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK && (uint64_t)f.size != d->size)
    rc = st_error_set(err, ST_ECORRUPT, "%s: size %lld, its descriptor says %llu", what,
                      (long long)f.size, (unsigned long long)d->size);
  if (rc == ST_OK)
    rc = st_layer_writer_new(&w, s, o->threads, err);
  if (rc == ST_OK) {
    st_layer_writer_set_dir_defaults(w, 0755, 0, 0, o->mtime);
    st_layer_writer_set_lower(w, lower);
    if (!(a = st_src_archive_new(false)))
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
    else if (st_src_file_attach(a, &f, false) != ARCHIVE_OK)
      rc = st_src_archive_error(a, &f, what, err);
  }
  if (rc == ST_OK) {
    st_feed fd = {.w = w, .what = what, .dest = "", .mtime = o->mtime, .file = &f,
                  .oci_whiteouts = true, .dirs = dirs};
    rc = st_src_feed_archive(a, &fd, err);
  }
  if (rc == ST_OK)
    rc = st_src_file_hash_rest(&f, err);
  if (rc == ST_OK) { /* the digest decides before anything is used */
    st_digest got;
    st_hasher_final(h, &got);
    if (!st_digest_equal(&got, &d->digest))
      rc = st_error_set(err, ST_ECORRUPT, "%s: content does not match its digest", what);
  }
  if (rc == ST_OK && (rc = st_layer_writer_finish_index(w, out, err)) < 0)
    st_error_prefix(err, "%s", what);
  if (rc == ST_OK && (rc = check_parents(*out, lower, dirs, what, err)) < 0) {
    st_layer_index_free(*out);
    *out = NULL;
  }
  st_dset_free(dirs);
  if (a)
    archive_read_free(a);
  st_layer_writer_free(w);
  st_src_file_close(&f);
  st_hasher_free(h);
  return rc;
}

/* Lays the entries of tree under dest into w. */
static int lay_tree(st_layer_writer *w, const st_layer_index *tree, const char *dest,
                    st_error *err) {
  size_t dl = strlen(dest);
  size_t n = st_layer_index_count(tree);
  for (size_t i = 0; i < n; i++) {
    st_entry e;
    int rc = st_entry_copy(&e, st_layer_index_entry(tree, i), err);
    if (rc < 0)
      return rc;
    if (dl) {
      char *p = NULL, *t = NULL;
      bool ok = asprintf(&p, "%s%s%s", dest, e.path[0] ? "/" : "", e.path) >= 0;
      if (ok && e.type == ST_ENTRY_HARDLINK)
        ok = asprintf(&t, "%s/%s", dest, e.target) >= 0;
      if (!ok) {
        st_entry_clear(&e);
        return st_error_set(err, ST_ENOMEM, "out of memory");
      }
      free(e.path);
      e.path = p;
      if (t) {
        free(e.target);
        e.target = t;
      }
    }
    if ((rc = st_layer_writer_add_stored(w, &e, err)) < 0)
      return rc;
  }
  return ST_OK;
}

int st_source_oci(st_layer_writer *w, st_store *s, const char *path, const char *ref,
                  const st_source_opts *o, st_error *err) {
  _cleanup_free_ char *dest = NULL;
  int rc = st_src_dest(o->dest, &dest, err);
  if (rc < 0)
    return st_error_prefix(err, "oci %s", path);
  _cleanup_(st_oci_layout_freep) st_oci_layout *l = NULL;
  _cleanup_(st_oci_manifest_freep) st_oci_manifest *m = NULL;
  _cleanup_(st_oci_config_freep) st_oci_config *c = NULL;
  if ((rc = st_oci_layout_open(&l, path, err)) < 0 ||
      (rc = st_oci_layout_image(l, ref, &m, &c, NULL, err)) < 0)
    return rc;
  st_layer_index *tree = NULL;
  for (size_t i = 0; i < m->n_layers && rc == ST_OK; i++) {
    st_layer_index *layer = NULL;
    rc = read_layer(s, l, &m->layers[i], i, tree, o, &layer, err);
    if (rc == ST_OK && !tree) {
      tree = layer;
      layer = NULL;
    } else if (rc == ST_OK) {
      st_layer_index *both[2] = {tree, layer}, *next = NULL;
      rc = st_compose_indexes(both, 2, &next, err);
      if (rc < 0) {
        char hex[ST_DIGEST_HEX_LEN + 1];
        st_error_prefix(err, "oci %s: layer %zu blob sha256:%s", path, i,
                        st_digest_hex(&m->layers[i].digest, hex));
      }
      st_layer_index_free(tree);
      tree = next;
    }
    st_layer_index_free(layer);
  }
  if (rc == ST_OK && tree)
    rc = lay_tree(w, tree, dest, err);
  st_layer_index_free(tree);
  return rc;
}

int st_source_oci_config(const char *path, const char *ref, st_oci_config **out,
                         st_digest *manifest_digest, st_error *err) {
  _cleanup_(st_oci_layout_freep) st_oci_layout *l = NULL;
  _cleanup_(st_oci_manifest_freep) st_oci_manifest *m = NULL;
  int rc = st_oci_layout_open(&l, path, err);
  if (rc == ST_OK)
    rc = st_oci_layout_image(l, ref, &m, out, manifest_digest, err);
  return rc;
}
