/* SPDX-License-Identifier: Apache-2.0 */
/* fsck and stats over every object of a store. */
#include "store-check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "dset.h"
#include "layer-index.h"
#include "pool.h"

struct objlist {
  st_digest *d;
  uint64_t *stored;
  size_t n, cap;
};

static int collect(const st_digest *d, uint64_t stored, void *ud) {
  struct objlist *l = ud;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 1024;
    st_digest *nd = realloc(l->d, cap * sizeof *nd);
    if (!nd)
      return ST_ENOMEM;
    l->d = nd;
    uint64_t *ns = realloc(l->stored, cap * sizeof *ns);
    if (!ns)
      return ST_ENOMEM;
    l->stored = ns;
    l->cap = cap;
  }
  l->d[l->n] = *d;
  l->stored[l->n++] = stored;
  return 0;
}

static void objlist_free(struct objlist *l) {
  free(l->d);
  free(l->stored);
}

static int list_kind(st_store *s, st_kind k, struct objlist *l, st_error *err) {
  int rc = st_store_list(s, k, collect, l, err);
  if (rc == ST_ENOMEM)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  return rc;
}

struct fsck {
  st_store *s;
  pthread_mutex_t lock;
  st_fsck_report_fn report;
  void *ud;
  st_fsck_result *res;
};

struct verify_job {
  struct fsck *f;
  st_kind kind;
  st_digest d;
};

static void report(struct fsck *f, const st_error *e, bool missing) {
  pthread_mutex_lock(&f->lock);
  if (missing)
    f->res->missing++;
  else
    f->res->bad++;
  if (f->report)
    f->report(e, f->ud);
  pthread_mutex_unlock(&f->lock);
}

/* An index must decode, and every chunk it names must be present. */
static void check_index(struct fsck *f, const st_digest *d) {
  st_layer_index *idx = NULL;
  st_error e = {0};
  char hex[ST_DIGEST_HEX_LEN + 1], chex[ST_DIGEST_HEX_LEN + 1];
  if (st_layer_index_load(&idx, f->s, d, &e) < 0) {
    report(f, &e, false);
    return;
  }
  for (size_t i = 0; i < st_layer_index_count(idx); i++) {
    const st_entry *en = st_layer_index_entry(idx, i);
    for (size_t c = 0; c < en->n_chunks; c++) {
      int has = st_store_has(f->s, ST_KIND_CHUNK, &en->chunks[c].digest, &e);
      if (has == 0) {
        st_error_set(&e, ST_ENOENT, "layer %s: /%s: chunk %s is missing", st_digest_hex(d, hex),
                     en->path, st_digest_hex(&en->chunks[c].digest, chex));
        report(f, &e, true);
      } else if (has < 0) {
        report(f, &e, false);
      }
    }
  }
  st_layer_index_free(idx);
}

static void verify_run(void *arg) {
  struct verify_job *j = arg;
  if (j->kind == ST_KIND_INDEX) {
    check_index(j->f, &j->d);
  } else {
    st_error e = {0};
    uint8_t *data = NULL;
    size_t len;
    if (st_store_get(j->f->s, j->kind, &j->d, &data, &len, &e) < 0)
      report(j->f, &e, false);
    free(data);
  }
  free(j);
}

int st_store_fsck(st_store *s, unsigned threads, st_fsck_report_fn report_fn, void *ud,
                  st_fsck_result *res, st_error *err) {
  memset(res, 0, sizeof *res);
  struct fsck f = {.s = s, .report = report_fn, .ud = ud, .res = res};
  pthread_mutex_init(&f.lock, NULL);
  st_pool *pool = NULL;
  int rc = st_pool_new(&pool, threads, threads * 8, err);
  for (int k = 0; k < ST_KIND_COUNT && rc == ST_OK; k++) {
    struct objlist l = {0};
    rc = list_kind(s, (st_kind)k, &l, err);
    for (size_t i = 0; i < l.n && rc == ST_OK; i++) {
      res->objects[k]++;
      res->stored_bytes[k] += l.stored[i];
      struct verify_job *j = malloc(sizeof *j);
      if (!j) {
        rc = st_error_set(err, ST_ENOMEM, "out of memory");
        break;
      }
      *j = (struct verify_job){&f, (st_kind)k, l.d[i]};
      st_pool_submit(pool, verify_run, j);
    }
    objlist_free(&l);
    st_pool_wait(pool);
  }
  st_pool_free(pool);
  pthread_mutex_destroy(&f.lock);
  if (rc == ST_OK && (res->bad || res->missing))
    rc = st_error_set(err, ST_ECORRUPT, "%llu corrupt objects, %llu missing chunks",
                      (unsigned long long)res->bad, (unsigned long long)res->missing);
  return rc;
}

int st_store_stats_get(st_store *s, st_store_stats *out, st_error *err) {
  memset(out, 0, sizeof *out);
  int rc = ST_OK;
  struct objlist idxs = {0};
  for (int k = 0; k < ST_KIND_COUNT && rc == ST_OK; k++) {
    struct objlist l = {0};
    rc = list_kind(s, (st_kind)k, &l, err);
    out->objects[k] = l.n;
    for (size_t i = 0; i < l.n; i++)
      out->stored_bytes[k] += l.stored[i];
    if (k == ST_KIND_INDEX) {
      idxs = l;
      continue;
    }
    objlist_free(&l);
  }
  st_dset *seen = st_dset_new();
  if (!seen && rc == ST_OK)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < idxs.n && rc == ST_OK; i++) {
    st_layer_index *idx = NULL;
    rc = st_layer_index_load(&idx, s, &idxs.d[i], err);
    if (rc < 0)
      break;
    out->layers++;
    for (size_t j = 0; j < st_layer_index_count(idx); j++) {
      const st_entry *e = st_layer_index_entry(idx, j);
      out->logical_referenced += e->type == ST_ENTRY_REGULAR ? e->size : 0;
      for (size_t c = 0; c < e->n_chunks; c++) {
        int fresh = st_dset_insert(seen, &e->chunks[c].digest, 0);
        if (fresh < 0) {
          rc = st_error_set(err, ST_ENOMEM, "out of memory");
          break;
        }
        if (fresh) {
          out->logical_unique += e->chunks[c].size;
          out->chunks_referenced++;
        }
      }
    }
    st_layer_index_free(idx);
  }
  st_dset_free(seen);
  objlist_free(&idxs);
  return rc;
}
