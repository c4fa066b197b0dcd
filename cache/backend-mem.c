/* SPDX-License-Identifier: Apache-2.0 */
/* The in-memory backend: objects in arrays indexed by a digest map, metadata
 * in a small list. Used by tests, with knobs to fail puts and call counters. */
#include "backend.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dset.h"

struct object {
  st_digest digest;
  uint8_t *data;
  size_t len;
  bool deleted;
};

struct meta {
  char *name;
  uint8_t *data;
  size_t len;
};

typedef struct {
  st_backend base;
  pthread_mutex_t lock;
  struct object *objs[ST_KIND_COUNT];
  size_t n_objs[ST_KIND_COUNT], cap_objs[ST_KIND_COUNT];
  st_dset *index[ST_KIND_COUNT];
  struct meta *metas;
  size_t n_metas;
  long fail_after;
  int fail_code;
  st_backend_mem_counts counts;
} mem_backend;

static struct object *lookup(mem_backend *mb, st_kind k, const st_digest *d) {
  uint64_t i;
  if (!st_dset_get(mb->index[k], d, &i) || mb->objs[k][i].deleted)
    return NULL;
  return &mb->objs[k][i];
}

static int mem_get(st_backend *b, st_kind k, const st_digest *d, size_t max, uint8_t **data,
                   size_t *len, st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  char hex[ST_DIGEST_HEX_LEN + 1];
  int rc = ST_OK;
  pthread_mutex_lock(&mb->lock);
  mb->counts.gets++;
  struct object *o = lookup(mb, k, d);
  if (!o)
    rc = st_error_set(err, ST_ENOENT, "%s %s not found", st_kind_name(k), st_digest_hex(d, hex));
  else if (o->len > max)
    rc = st_error_set(err, ST_ELIMIT, "%s %s: too large", st_kind_name(k), st_digest_hex(d, hex));
  else if (!(*data = malloc(o->len + 1)))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  else {
    memcpy(*data, o->data, o->len);
    (*data)[o->len] = 0;
    *len = o->len;
  }
  pthread_mutex_unlock(&mb->lock);
  return rc;
}

static int mem_has(st_backend *b, st_kind k, const st_digest *d, st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  pthread_mutex_lock(&mb->lock);
  mb->counts.has++;
  int r = lookup(mb, k, d) != NULL;
  pthread_mutex_unlock(&mb->lock);
  return r;
}

static int mem_put(st_backend *b, st_kind k, const st_digest *d, const void *data, size_t len,
                   st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  char hex[ST_DIGEST_HEX_LEN + 1];
  int rc = ST_OK;
  pthread_mutex_lock(&mb->lock);
  mb->counts.puts++;
  if (mb->fail_after == 0) {
    rc = st_error_set(err, mb->fail_code, "%s %s: injected failure", st_kind_name(k),
                      st_digest_hex(d, hex));
    goto out;
  }
  if (mb->fail_after > 0)
    mb->fail_after--;
  uint64_t i;
  if (st_dset_get(mb->index[k], d, &i)) {
    struct object *o = &mb->objs[k][i];
    if (o->deleted) { /* a put after a delete stores the new bytes */
      uint8_t *copy = malloc(len ? len : 1);
      if (!copy) {
        rc = st_error_set(err, ST_ENOMEM, "out of memory");
        goto out;
      }
      if (len)
        memcpy(copy, data, len);
      free(o->data);
      *o = (struct object){*d, copy, len, false};
    }
    goto out;
  }
  if (mb->n_objs[k] == mb->cap_objs[k]) {
    size_t cap = mb->cap_objs[k] ? mb->cap_objs[k] * 2 : 64;
    struct object *n = realloc(mb->objs[k], cap * sizeof *n);
    if (!n) {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
      goto out;
    }
    mb->objs[k] = n;
    mb->cap_objs[k] = cap;
  }
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy || st_dset_insert(mb->index[k], d, mb->n_objs[k]) < 0) {
    free(copy);
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  if (len)
    memcpy(copy, data, len);
  mb->objs[k][mb->n_objs[k]++] = (struct object){*d, copy, len, false};
out:
  pthread_mutex_unlock(&mb->lock);
  return rc;
}

static int mem_del(st_backend *b, st_kind k, const st_digest *d, st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  char hex[ST_DIGEST_HEX_LEN + 1];
  pthread_mutex_lock(&mb->lock);
  mb->counts.dels++;
  struct object *o = lookup(mb, k, d);
  if (o)
    o->deleted = true;
  pthread_mutex_unlock(&mb->lock);
  return o ? ST_OK
           : st_error_set(err, ST_ENOENT, "%s %s not found", st_kind_name(k),
                          st_digest_hex(d, hex));
}

static int mem_list(st_backend *b, st_kind k, st_backend_list_cb cb, void *ud, st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  pthread_mutex_lock(&mb->lock);
  size_t n = mb->n_objs[k];
  pthread_mutex_unlock(&mb->lock);
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&mb->lock);
    struct object o = mb->objs[k][i];
    pthread_mutex_unlock(&mb->lock);
    if (o.deleted)
      continue;
    int rc = cb(&o.digest, o.len, ud);
    if (rc)
      return rc;
  }
  return ST_OK;
}

static int mem_flush(st_backend *b, st_error *err) { return ST_OK; }

static int mem_meta_get(st_backend *b, const char *name, size_t max, uint8_t **data, size_t *len,
                        st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  int rc = st_error_set(err, ST_ENOENT, "%s not found", name);
  pthread_mutex_lock(&mb->lock);
  for (size_t i = 0; i < mb->n_metas; i++) {
    if (strcmp(mb->metas[i].name, name) != 0)
      continue;
    if (mb->metas[i].len > max) {
      rc = st_error_set(err, ST_ELIMIT, "%s: too large", name);
    } else if ((*data = malloc(mb->metas[i].len + 1))) {
      memcpy(*data, mb->metas[i].data, mb->metas[i].len);
      (*data)[mb->metas[i].len] = 0;
      *len = mb->metas[i].len;
      rc = ST_OK;
      st_error_clear(err);
    } else {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
    }
    break;
  }
  pthread_mutex_unlock(&mb->lock);
  return rc;
}

static int mem_meta_put(st_backend *b, const char *name, const void *data, size_t len,
                        st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  if (len)
    memcpy(copy, data, len);
  pthread_mutex_lock(&mb->lock);
  for (size_t i = 0; i < mb->n_metas; i++) {
    if (strcmp(mb->metas[i].name, name) == 0) {
      free(mb->metas[i].data);
      mb->metas[i].data = copy;
      mb->metas[i].len = len;
      pthread_mutex_unlock(&mb->lock);
      return ST_OK;
    }
  }
  struct meta *n = realloc(mb->metas, (mb->n_metas + 1) * sizeof *n);
  char *nm = strdup(name);
  if (!n || !nm) {
    if (n)
      mb->metas = n;
    free(nm);
    free(copy);
    pthread_mutex_unlock(&mb->lock);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  mb->metas = n;
  mb->metas[mb->n_metas++] = (struct meta){nm, copy, len};
  pthread_mutex_unlock(&mb->lock);
  return ST_OK;
}

static int mem_meta_del(st_backend *b, const char *name, st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  pthread_mutex_lock(&mb->lock);
  for (size_t i = 0; i < mb->n_metas; i++) {
    if (strcmp(mb->metas[i].name, name) == 0) {
      free(mb->metas[i].name);
      free(mb->metas[i].data);
      mb->metas[i] = mb->metas[--mb->n_metas];
      pthread_mutex_unlock(&mb->lock);
      return ST_OK;
    }
  }
  pthread_mutex_unlock(&mb->lock);
  return st_error_set(err, ST_ENOENT, "%s not found", name);
}

static int mem_meta_list(st_backend *b, const char *prefix, int (*cb)(const char *, void *),
                         void *ud, st_error *err) {
  mem_backend *mb = (mem_backend *)b;
  size_t plen = strlen(prefix);
  for (size_t i = 0;; i++) {
    pthread_mutex_lock(&mb->lock);
    char *name = i < mb->n_metas ? strdup(mb->metas[i].name) : NULL;
    bool more = i < mb->n_metas;
    pthread_mutex_unlock(&mb->lock);
    if (!more)
      return ST_OK;
    if (!name)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    int rc = 0;
    if (strncmp(name, prefix, plen) == 0 && name[plen] == '/')
      rc = cb(name, ud);
    free(name);
    if (rc)
      return rc;
  }
}

static void mem_free(st_backend *b) {
  mem_backend *mb = (mem_backend *)b;
  for (int k = 0; k < ST_KIND_COUNT; k++) {
    for (size_t i = 0; i < mb->n_objs[k]; i++)
      free(mb->objs[k][i].data);
    free(mb->objs[k]);
    st_dset_free(mb->index[k]);
  }
  for (size_t i = 0; i < mb->n_metas; i++) {
    free(mb->metas[i].name);
    free(mb->metas[i].data);
  }
  free(mb->metas);
  pthread_mutex_destroy(&mb->lock);
  free(mb);
}

static const st_backend_ops mem_ops = {
    .name = "mem",
    .get = mem_get,
    .has = mem_has,
    .put = mem_put,
    .del = mem_del,
    .list = mem_list,
    .flush = mem_flush,
    .meta_get = mem_meta_get,
    .meta_put = mem_meta_put,
    .meta_del = mem_meta_del,
    .meta_list = mem_meta_list,
    .free = mem_free,
};

int st_backend_mem_new(st_backend **out, st_error *err) {
  mem_backend *mb = calloc(1, sizeof *mb);
  if (!mb)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  mb->base.ops = &mem_ops;
  mb->fail_after = -1;
  pthread_mutex_init(&mb->lock, NULL);
  for (int k = 0; k < ST_KIND_COUNT; k++) {
    mb->index[k] = st_dset_new();
    if (!mb->index[k]) {
      mem_free(&mb->base);
      return st_error_set(err, ST_ENOMEM, "out of memory");
    }
  }
  *out = &mb->base;
  return ST_OK;
}

void st_backend_mem_fail_puts_after(st_backend *b, long n, int code) {
  mem_backend *mb = (mem_backend *)b;
  pthread_mutex_lock(&mb->lock);
  mb->fail_after = n;
  mb->fail_code = code;
  pthread_mutex_unlock(&mb->lock);
}

st_backend_mem_counts st_backend_mem_counters(st_backend *b) {
  mem_backend *mb = (mem_backend *)b;
  pthread_mutex_lock(&mb->lock);
  st_backend_mem_counts c = mb->counts;
  pthread_mutex_unlock(&mb->lock);
  return c;
}
