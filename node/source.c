/* SPDX-License-Identifier: Apache-2.0 */
/* Image sources for the pre-warm: a local store (st_image_copy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

void st_node_source_free(st_node_source *s) {
  if (!s)
    return;
  if (s->free)
    s->free(s);
  free(s->name);
  free(s);
}

static int store_resolve(st_node_source *s, const char *ref, st_digest *out, st_error *err) {
  int rc = st_image_resolve(s->impl, ref, out, err);
  if (rc == ST_ENOENT)
    return st_error_set(err, ST_ENOENT, "image %s not found in store %s", ref, s->name);
  return rc;
}

static int store_pull(st_node_source *s, st_store *cache, const st_digest *image,
                      const st_copy_opts *opts, st_copy_stats *stats, st_error *err) {
  return st_image_copy(cache, s->impl, image, opts, stats, err);
}

static void store_free(st_node_source *s) { st_store_free(s->impl); }

int st_node_source_store(st_node_source **out, const char *dir, st_error *err) {
  st_store *st = NULL;
  int rc = st_store_open(&st, dir, 0, err);
  if (rc < 0)
    return rc;
  st_node_source *s = calloc(1, sizeof *s);
  if (!s || !(s->name = strdup(dir))) {
    free(s);
    st_store_free(st);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  s->resolve = store_resolve;
  s->pull = store_pull;
  s->free = store_free;
  s->impl = st;
  *out = s;
  return ST_OK;
}
