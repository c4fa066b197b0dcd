/* SPDX-License-Identifier: Apache-2.0 */
/* OCI image sources: the layers of one image of an OCI image layout or a
 * docker archive are streamed (oci/import.c: every blob hashed and its
 * uncompressed tar hashed for its diff_id as it is read), each into a layer
 * of its own with OCI whiteouts as strata whiteouts and opaque directories;
 * the layers are composed in order and the resulting tree is laid under
 * dest. */
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

/* Streams layer li into a new layer (not stored: it only feeds the
 * composition). lower: the layers composed so far, so that a path under a
 * lower symlink is refused instead of written through it. */
static int read_layer(st_store *s, const st_oci_src *src, size_t li, const st_layer_index *lower,
                      const st_source_opts *o, st_layer_index **out, st_error *err) {
  char name[PATH_MAX], what[2 * PATH_MAX + 64];
  snprintf(what, sizeof what, "oci %s: layer %zu %s", st_oci_src_path(src), li,
           st_oci_src_layer_name(src, li, name, sizeof name));
  _cleanup_(st_oci_layer_reader_freep) st_oci_layer_reader *r = NULL;
  _cleanup_(st_layer_writer_freep) st_layer_writer *w = NULL;
  _cleanup_(st_dset_freep) st_dset *dirs = st_dset_new();
  if (!dirs)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = st_oci_layer_reader_open(&r, src, li, err);
  if (rc < 0)
    return st_error_prefix(err, "%s", what);
  if ((rc = st_layer_writer_new(&w, s, o->threads, err)) < 0)
    return rc;
  st_layer_writer_set_dir_defaults(w, 0755, 0, 0, o->mtime);
  st_layer_writer_set_lower(w, lower);
  st_feed fd = {.w = w, .what = what, .dest = "", .mtime = o->mtime, .oci_whiteouts = true,
                .dirs = dirs};
  if ((rc = st_src_feed_archive(st_oci_layer_reader_tar(r), &fd, err)) < 0)
    return rc;
  /* the blob digest and the diff_id decide before anything is used */
  if ((rc = st_oci_layer_reader_finish(r, err)) < 0 ||
      (rc = st_layer_writer_finish_index(w, out, err)) < 0)
    return st_error_prefix(err, "%s", what);
  if ((rc = check_parents(*out, lower, dirs, what, err)) < 0) {
    st_layer_index_free(*out);
    *out = NULL;
  }
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
  _cleanup_(st_oci_src_freep) st_oci_src *src = NULL;
  if ((rc = st_oci_src_open(&src, path, ref, err)) < 0)
    return rc;
  st_layer_index *tree = NULL;
  for (size_t i = 0; i < st_oci_src_layers(src) && rc == ST_OK; i++) {
    st_layer_index *layer = NULL;
    rc = read_layer(s, src, i, tree, o, &layer, err);
    if (rc == ST_OK && !tree) {
      tree = layer;
      layer = NULL;
    } else if (rc == ST_OK) {
      st_layer_index *both[2] = {tree, layer}, *next = NULL;
      rc = st_compose_indexes(both, 2, &next, err);
      if (rc < 0) {
        char name[PATH_MAX];
        st_error_prefix(err, "oci %s: layer %zu %s", path, i,
                        st_oci_src_layer_name(src, i, name, sizeof name));
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
                         st_digest *key, st_error *err) {
  _cleanup_(st_oci_src_freep) st_oci_src *src = NULL;
  int rc = st_oci_src_open(&src, path, ref, err);
  if (rc < 0)
    return rc;
  if (key)
    *key = *st_oci_src_key(src);
  *out = st_oci_src_take_config(src);
  return ST_OK;
}
