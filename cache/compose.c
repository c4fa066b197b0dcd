/* SPDX-License-Identifier: Apache-2.0 */
/* Overlay-style merge of layer indexes. Each pass folds one layer into the
 * running result: entries of the result that the layer hides are dropped,
 * the layer's own entries are added, and the result is re-sorted. */
#include "compose.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct item {
  st_entry e;
  size_t layer; /* which layer the entry came from */
};

struct result {
  struct item *v;
  size_t n, cap;
};

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int item_cmp(const void *a, const void *b) {
  return strcmp(((const struct item *)a)->e.path, ((const struct item *)b)->e.path);
}

static bool in_sorted(char **v, size_t n, const char *p) {
  return n && bsearch(&p, v, n, sizeof *v, str_cmp) != NULL;
}

/* True if some proper ancestor of path is in hide (sorted). */
static bool under_hidden(char **hide, size_t n, const char *path) {
  char buf[ST_PATH_MAX + 1];
  size_t len = strlen(path);
  if (!n || len > ST_PATH_MAX)
    return false;
  memcpy(buf, path, len + 1);
  for (char *s = strrchr(buf, '/');; s = strrchr(buf, '/')) {
    if (!s) {
      /* the root hides everything only if it is itself in hide */
      buf[0] = '\0';
      return in_sorted(hide, n, buf) && len > 0;
    }
    *s = '\0';
    if (in_sorted(hide, n, buf))
      return true;
  }
}

static int push(struct result *r, const st_entry *e, size_t layer, st_error *err) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 1024;
    struct item *nv = realloc(r->v, cap * sizeof *nv);
    if (!nv)
      return st_error_set(err, ST_ENOMEM, "compose: out of memory");
    r->v = nv;
    r->cap = cap;
  }
  int rc = st_entry_copy(&r->v[r->n].e, e, err);
  if (rc == ST_OK)
    r->v[r->n++].layer = layer;
  return rc;
}

/* Folds layer L (index li) into r. */
static int fold(struct result *r, const st_layer_index *L, size_t li, st_error *err) {
  size_t n = st_layer_index_count(L);
  char **hide = malloc((n ? n : 1) * sizeof *hide);   /* subtrees hidden below */
  char **gone = malloc((n ? n : 1) * sizeof *gone);   /* exact paths removed */
  if (!hide || !gone) {
    free(hide);
    free(gone);
    return st_error_set(err, ST_ENOMEM, "compose: out of memory");
  }
  size_t nh = 0, ng = 0;
  for (size_t i = 0; i < n; i++) {
    const st_entry *e = st_layer_index_entry(L, i);
    gone[ng++] = e->path; /* replaced, or whited out */
    if (e->type != ST_ENTRY_DIR || e->opaque)
      hide[nh++] = e->path;
  }
  /* entries are sorted, so both lists are sorted */
  size_t keep = 0;
  for (size_t i = 0; i < r->n; i++) {
    struct item *it = &r->v[i];
    if (in_sorted(gone, ng, it->e.path) || under_hidden(hide, nh, it->e.path))
      st_entry_clear(&it->e);
    else
      r->v[keep++] = *it;
  }
  r->n = keep;
  free(hide);
  free(gone);
  int rc = ST_OK;
  for (size_t i = 0; i < n && rc == ST_OK; i++) {
    const st_entry *e = st_layer_index_entry(L, i);
    if (e->type != ST_ENTRY_WHITEOUT)
      rc = push(r, e, li, err);
  }
  if (rc == ST_OK) {
    if (r->n > 1)
      qsort(r->v, r->n, sizeof *r->v, item_cmp);
    for (size_t i = 0; i < r->n; i++)
      r->v[i].e.opaque = false; /* opacity only speaks about lower layers */
  }
  return rc;
}

/* A hardlink must point at a regular file of its own layer; if an upper
 * layer replaced the target, the link becomes a copy of the old content. */
static int fix_hardlinks(struct result *r, st_layer_index *const *idxs, st_error *err) {
  for (size_t i = 0; i < r->n; i++) {
    st_entry *e = &r->v[i].e;
    if (e->type != ST_ENTRY_HARDLINK)
      continue;
    struct item key = {.e = {.path = e->target}};
    struct item *t = bsearch(&key, r->v, r->n, sizeof *r->v, item_cmp);
    if (t && t->layer == r->v[i].layer && t->e.type == ST_ENTRY_REGULAR)
      continue;
    const st_entry *orig = st_layer_index_find(idxs[r->v[i].layer], e->target);
    if (!orig || orig->type != ST_ENTRY_REGULAR)
      return st_error_set(err, ST_EFORMAT, "compose: hardlink /%s has no target", e->path);
    st_entry copy;
    int rc = st_entry_copy(&copy, orig, err);
    if (rc < 0)
      return rc;
    free(copy.path);
    copy.path = e->path;
    e->path = NULL;
    copy.mode = e->mode;
    st_entry_clear(e);
    *e = copy;
  }
  return ST_OK; /* the caller's normalise re-canonicalises hardlink groups */
}

int st_compose_indexes(st_layer_index *const *idxs, size_t n, st_layer_index **out,
                       st_error *err) {
  struct result r = {0};
  int rc = ST_OK;
  for (size_t i = 0; i < n && rc == ST_OK; i++)
    rc = fold(&r, idxs[i], i, err);
  if (rc == ST_OK)
    rc = fix_hardlinks(&r, idxs, err);
  st_chunk_params cp = n ? *st_layer_index_chunking(idxs[n - 1]) : st_chunk_params_default();
  st_layer_index *res = rc == ST_OK ? st_layer_index_new(&cp) : NULL;
  if (rc == ST_OK && !res)
    rc = st_error_set(err, ST_ENOMEM, "compose: out of memory");
  size_t i = 0;
  for (; i < r.n && rc == ST_OK; i++)
    rc = st_layer_index_add(res, &r.v[i].e, err);
  for (; i < r.n; i++)
    st_entry_clear(&r.v[i].e);
  free(r.v);
  st_entry root = {.type = ST_ENTRY_DIR, .mode = 0755};
  if (rc == ST_OK)
    rc = st_layer_index_normalize(res, &root, NULL, err);
  if (rc == ST_OK)
    rc = st_layer_index_validate(res, err);
  if (rc < 0) {
    st_layer_index_free(res);
    return rc;
  }
  *out = res;
  return ST_OK;
}

int st_compose(st_store *s, const st_digest *layers, size_t n, st_layer_index **out,
               st_error *err) {
  st_layer_index **idxs = calloc(n ? n : 1, sizeof *idxs);
  if (!idxs)
    return st_error_set(err, ST_ENOMEM, "compose: out of memory");
  int rc = ST_OK;
  for (size_t i = 0; i < n && rc == ST_OK; i++)
    rc = st_layer_index_load(&idxs[i], s, &layers[i], err);
  if (rc == ST_OK)
    rc = st_compose_indexes(idxs, n, out, err);
  for (size_t i = 0; i < n; i++)
    st_layer_index_free(idxs[i]);
  free(idxs);
  return rc;
}
