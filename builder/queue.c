/* SPDX-License-Identifier: Apache-2.0 */
/* The build queue: the table of builds, its persistence in the store's metadata, the worker
 * threads and the event histories. One mutex guards everything; builds themselves run
 * without it. The state diagram is in queue.h. */
#include "queue.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "build.h"
#include "cleanup.h"
#include "dset.h"
#include "fs.h"
#include "log.h"
#include "queue-private.h"
#include "unpack.h"

#define DEFAULT_MAX_EVENTS 10000
#define CANCEL_USER 1
#define CANCEL_SHUTDOWN 2

/* A build's private directory (context + run roots) between submit and its run. */
struct workspace {
  char *dir;                 /* mkdtemp'd (owned) */
  st_build_context *ctx;     /* materialised in dir/context */
};

struct build {
  st_build_info info;
  st_bevent *ev;             /* history, oldest first */
  size_t n_ev, cap_ev;
  bool ev_loaded;            /* ev holds the stored history (else load it on demand) */
  uint64_t next_seq;
  atomic_int cancel;
  struct workspace *ws;      /* nullable: materialised at submit, used by the run */
};

struct st_build_queue {
  st_store *s;
  st_build_queue_opts o;
  char *tmpdir;
  pthread_mutex_t lock;
  pthread_cond_t work;       /* a build was queued, or stopping */
  pthread_cond_t progress;   /* some build got events */
  struct build **builds;     /* in submission order of their first attempt */
  size_t n_builds, cap_builds;
  st_dset *by_id;            /* id -> index into builds */
  struct build **fifo;       /* queued builds, oldest first */
  size_t n_fifo, cap_fifo;
  bool stopping;
  pthread_t *threads;
  unsigned n_threads;
  st_build_queue_notify_fn notify;
  void *notify_ud;
};

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void meta_name(char *buf, size_t len, const st_digest *id, const char *what) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  snprintf(buf, len, "builds/%s/%s", st_digest_hex(id, hex), what);
}

static void notify(st_build_queue *q, const st_digest *id) {
  pthread_mutex_lock(&q->lock);
  st_build_queue_notify_fn fn = q->notify;
  void *ud = q->notify_ud;
  pthread_mutex_unlock(&q->lock);
  if (fn)
    fn(id, ud);
}

void st_build_queue_set_notify(st_build_queue *q, st_build_queue_notify_fn fn, void *ud) {
  pthread_mutex_lock(&q->lock);
  q->notify = fn;
  q->notify_ud = ud;
  pthread_mutex_unlock(&q->lock);
}

/* ---- persistence (called with the lock held) ---- */

static int save_record(st_build_queue *q, struct build *b, st_error *err) {
  char name[128];
  _cleanup_free_ char *text = NULL;
  size_t len;
  if (st_bq_record_format(&b->info, &text, &len) < 0)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  meta_name(name, sizeof name, &b->info.id, "record");
  return st_store_meta_put(q->s, name, text, len, err);
}

static int save_events(st_build_queue *q, struct build *b, st_error *err) {
  char name[128];
  _cleanup_free_ char *text = NULL;
  size_t len;
  if (st_bq_events_format(b->ev, b->n_ev, &text, &len) < 0)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  meta_name(name, sizeof name, &b->info.id, "events");
  return st_store_meta_put(q->s, name, text, len, err);
}

/* Saves the record and the history; a failure is logged (the build goes on in memory). */
static void save(st_build_queue *q, struct build *b) {
  st_error err = {0};
  char hex[ST_DIGEST_HEX_LEN + 1];
  if (save_events(q, b, &err) < 0 || save_record(q, b, &err) < 0)
    st_warn("build sha256:%s: cannot record its state: %s", st_digest_hex(&b->info.id, hex),
            err.msg);
}

/* Reads the stored history into b (for builds of an earlier process). */
static void load_events(st_build_queue *q, struct build *b) {
  if (b->ev_loaded)
    return;
  b->ev_loaded = true;
  char name[128];
  meta_name(name, sizeof name, &b->info.id, "events");
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  st_error err = {0};
  st_bevent *v = NULL;
  size_t n = 0;
  if (st_store_meta_get(q->s, name, ST_BUILD_EVENTS_MAX, &data, &len, &err) < 0 ||
      st_bq_events_parse(&v, &n, (const char *)data, len, &err) < 0) {
    if (err.code != ST_ENOENT)
      st_warn("%s: %s", name, err.msg);
    return;
  }
  st_bevents_free(b->ev, b->n_ev);
  b->ev = v;
  b->n_ev = b->cap_ev = n;
  for (size_t i = 0; i < n; i++)
    if (v[i].seq >= b->next_seq)
      b->next_seq = v[i].seq + 1;
}

/* ---- events (lock held) ---- */

/* Drops the oldest tenth of the log lines once the history is full. */
static void trim_events(st_build_queue *q, struct build *b) {
  if (b->n_ev < q->o.max_events)
    return;
  size_t drop = q->o.max_events / 10 + 1, o = 0;
  for (size_t i = 0; i < b->n_ev; i++) {
    if (drop && b->ev[i].kind == ST_BEV_LOG) {
      st_bevent_clear(&b->ev[i]);
      drop--;
      continue;
    }
    b->ev[o++] = b->ev[i];
  }
  b->n_ev = o;
}

/* Appends a copy of *ev (seq and time are set here) and wakes watchers. */
static void add_event(st_build_queue *q, struct build *b, const st_bevent *ev) {
  trim_events(q, b);
  if (b->n_ev == b->cap_ev) {
    size_t cap = b->cap_ev ? 2 * b->cap_ev : 32;
    st_bevent *v = realloc(b->ev, cap * sizeof *v);
    if (!v)
      return; /* the event is lost; the state in the record stays right */
    b->ev = v;
    b->cap_ev = cap;
  }
  st_bevent *e = &b->ev[b->n_ev];
  if (st_bevent_copy(e, ev) < 0)
    return;
  e->seq = b->next_seq++;
  e->time = wall_now();
  b->n_ev++;
  pthread_cond_broadcast(&q->progress);
}

static void set_state(st_build_queue *q, struct build *b, st_build_state st, int code,
                      const char *why) {
  b->info.state = st;
  free(b->info.error);
  b->info.error = NULL;
  b->info.error_code = 0;
  if (why) {
    b->info.error = st_bq_clean(why, ST_BUILD_TEXT_MAX);
    b->info.error_code = code;
  }
  if (st_build_state_final(st))
    b->info.finished = wall_now();
  st_bevent ev = {.kind = ST_BEV_STATE, .state = st, .text = b->info.error};
  add_event(q, b, &ev);
  save(q, b);
}

/* ---- the table (lock held) ---- */

static struct build *find(st_build_queue *q, const st_digest *id) {
  uint64_t i;
  return st_dset_get(q->by_id, id, &i) ? q->builds[i] : NULL;
}

static int insert(st_build_queue *q, struct build *b, st_error *err) {
  if (q->n_builds == q->cap_builds) {
    size_t cap = q->cap_builds ? 2 * q->cap_builds : 16;
    struct build **v = realloc(q->builds, cap * sizeof *v);
    if (!v)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    q->builds = v;
    q->cap_builds = cap;
  }
  if (st_dset_insert(q->by_id, &b->info.id, q->n_builds) < 0)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  q->builds[q->n_builds++] = b;
  return ST_OK;
}

static int enqueue(st_build_queue *q, struct build *b, st_error *err) {
  if (q->n_fifo == q->cap_fifo) {
    size_t cap = q->cap_fifo ? 2 * q->cap_fifo : 16;
    struct build **v = realloc(q->fifo, cap * sizeof *v);
    if (!v)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    q->fifo = v;
    q->cap_fifo = cap;
  }
  q->fifo[q->n_fifo++] = b;
  pthread_cond_signal(&q->work);
  return ST_OK;
}

static void workspace_free(struct workspace *ws) {
  if (!ws)
    return;
  st_build_context_free(ws->ctx);
  st_remove_tree(AT_FDCWD, ws->dir, NULL);
  free(ws->dir);
  free(ws);
}

static void build_free(struct build *b) {
  if (!b)
    return;
  st_build_info_clear(&b->info);
  st_bevents_free(b->ev, b->n_ev);
  workspace_free(b->ws);
  free(b);
}

/* ---- workspaces ---- */

/* A fresh private directory with the request's context materialised in it. */
static int workspace_new(st_build_queue *q, const st_build_request *req, struct workspace **out,
                         st_error *err) {
  struct workspace *ws = calloc(1, sizeof *ws);
  if (!ws || asprintf(&ws->dir, "%s/strata-build-XXXXXX", q->tmpdir) < 0) {
    free(ws);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  if (!mkdtemp(ws->dir)) {
    int rc = st_error_errno(err, errno, "mkdtemp %s", ws->dir);
    free(ws->dir);
    free(ws);
    return rc;
  }
  char ctxdir[PATH_MAX];
  snprintf(ctxdir, sizeof ctxdir, "%s/context", ws->dir);
  int rc = st_build_context_open(&ws->ctx, q->s, req, ctxdir, q->o.threads, err);
  if (rc < 0) {
    workspace_free(ws);
    return rc;
  }
  *out = ws;
  return ST_OK;
}

/* ---- running a build (no lock held) ---- */

struct run {
  st_build_queue *q;
  struct build *b;
  const st_recipe_instance *ri;
  const char *layer;    /* the layer being built, NULL between layers */
  size_t index;
  double t0;
  st_build_image *images;
  size_t n_images;
};

static void on_build_event(const st_build_event *ev, void *ud) {
  struct run *r = ud;
  st_bevent e = {.cell = (char *)ev->cell, .layer = (char *)ev->layer,
                 .index = (uint32_t)ev->index, .count = (uint32_t)ev->count,
                 .bytes = ev->bytes, .bytes_new = ev->bytes_new, .seconds = ev->seconds,
                 .digest = ev->digest};
  _cleanup_free_ char *line = NULL;
  switch (ev->kind) {
  case ST_BUILD_EV_BUILDING:
    e.kind = ST_BEV_LAYER, e.layer_state = ST_LAYER_RUNNING;
    r->layer = ev->layer, r->index = ev->index, r->t0 = st_now();
    break;
  case ST_BUILD_EV_CACHED:
  case ST_BUILD_EV_BUILT:
    e.kind = ST_BEV_LAYER;
    e.layer_state = ev->kind == ST_BUILD_EV_CACHED ? ST_LAYER_CACHED : ST_LAYER_DONE;
    r->layer = NULL;
    break;
  case ST_BUILD_EV_LOG:
    e.kind = ST_BEV_LOG;
    e.text = line = st_bq_clean(ev->line ? ev->line : "", ST_BUILD_TEXT_MAX);
    if (!line)
      return;
    break;
  case ST_BUILD_EV_IMAGE: {
    e.kind = ST_BEV_IMAGE;
    e.text = (char *)ev->ref;
    st_build_image *v = realloc(r->images, (r->n_images + 1) * sizeof *v);
    if (v) {
      r->images = v;
      st_build_image *m = &v[r->n_images];
      *m = (st_build_image){.ref = strdup(ev->ref), .cell = strdup(ev->cell), .digest = ev->digest};
      if (m->ref && m->cell)
        r->n_images++;
      else
        free(m->ref), free(m->cell);
    }
    break;
  }
  default:
    return;
  }
  pthread_mutex_lock(&r->q->lock);
  add_event(r->q, r->b, &e);
  if (e.kind != ST_BEV_LOG)
    save(r->q, r->b);
  pthread_mutex_unlock(&r->q->lock);
  notify(r->q, &r->b->info.id);
}

static void emit(struct run *r, const st_bevent *e) {
  pthread_mutex_lock(&r->q->lock);
  add_event(r->q, r->b, e);
  save(r->q, r->b);
  pthread_mutex_unlock(&r->q->lock);
  notify(r->q, &r->b->info.id);
}

/* Builds every selected cell of b in its workspace. */
static int run_build(st_build_queue *q, struct build *b, struct workspace *ws, struct run *r,
                     st_error *err) {
  st_recipe_instance **v = NULL;
  size_t n = 0;
  int rc = st_build_context_instances(ws->ctx, &b->info.req, &v, &n, err);
  for (size_t i = 0; i < n && rc == ST_OK; i++) {
    const st_recipe_instance *ri = v[i];
    for (size_t l = 0; l < ri->n_layers; l++) {
      st_bevent e = {.kind = ST_BEV_LAYER, .layer_state = ST_LAYER_QUEUED,
                     .cell = ri->cell_name, .layer = ri->layers[l].name, .index = (uint32_t)l,
                     .count = (uint32_t)ri->n_layers};
      emit(r, &e);
    }
    st_build_opts bo = {.threads = q->o.threads, .mtime = b->info.req.mtime,
                        .tmpdir = ws->dir, .on_event = on_build_event, .ud = r,
                        .input_digest = st_build_context_input_digest, .input_ud = ws->ctx,
                        .cancel = &b->cancel};
    r->ri = ri;
    r->layer = NULL;
    rc = st_build_instance(q->s, ri, &bo, NULL, err);
    if (rc < 0 && r->layer) {
      st_bevent e = {.kind = ST_BEV_LAYER, .layer_state = ST_LAYER_FAILED,
                     .cell = ri->cell_name, .layer = (char *)r->layer,
                     .index = (uint32_t)r->index, .count = (uint32_t)ri->n_layers,
                     .seconds = st_now() - r->t0, .text = err->msg};
      emit(r, &e);
    }
  }
  st_build_instances_free(v, n);
  return rc;
}

/* Records the outcome (lock held). */
static void finish_build(st_build_queue *q, struct build *b, int rc, const st_error *err,
                         struct run *r) {
  int why = atomic_exchange(&b->cancel, 0);
  if (rc == ST_OK) {
    b->info.images = r->images;
    b->info.n_images = r->n_images;
    r->images = NULL;
    r->n_images = 0;
    set_state(q, b, ST_BUILD_SUCCEEDED, 0, NULL);
  } else if (rc == ST_ECANCELED && why == CANCEL_SHUTDOWN) {
    b->info.started = 0;
    set_state(q, b, ST_BUILD_QUEUED, 0, NULL); /* runs again after the next open */
  } else if (rc == ST_ECANCELED && why == CANCEL_USER) {
    set_state(q, b, ST_BUILD_CANCELLED, ST_ECANCELED, "cancelled");
  } else {
    set_state(q, b, ST_BUILD_FAILED, rc, err->msg);
  }
  for (size_t i = 0; i < r->n_images; i++) {
    free(r->images[i].ref);
    free(r->images[i].cell);
  }
  free(r->images);
}

static void *worker_main(void *arg) {
  st_build_queue *q = arg;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (!q->stopping && q->n_fifo == 0)
      pthread_cond_wait(&q->work, &q->lock);
    if (q->stopping)
      break;
    struct build *b = q->fifo[0];
    memmove(q->fifo, q->fifo + 1, --q->n_fifo * sizeof *q->fifo);
    if (b->info.state != ST_BUILD_QUEUED)
      continue; /* cancelled while queued */
    b->info.started = wall_now();
    set_state(q, b, ST_BUILD_RUNNING, 0, NULL);
    struct workspace *ws = ST_TAKE_PTR(b->ws);
    pthread_mutex_unlock(&q->lock);
    notify(q, &b->info.id);

    st_error err = {0};
    struct run r = {.q = q, .b = b};
    int rc = ws ? ST_OK : workspace_new(q, &b->info.req, &ws, &err);
    if (rc == ST_OK)
      rc = run_build(q, b, ws, &r, &err);
    workspace_free(ws);

    pthread_mutex_lock(&q->lock);
    finish_build(q, b, rc, &err, &r);
    pthread_mutex_unlock(&q->lock);
    notify(q, &b->info.id);
    pthread_mutex_lock(&q->lock);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

/* ---- open / free ---- */

struct names {
  char **v;
  size_t n, cap;
};

static int collect_record(const char *name, void *ud) {
  struct names *ns = ud;
  size_t len = strlen(name);
  if (len < 7 || strcmp(name + len - 7, "/record"))
    return 0;
  if (ns->n == ns->cap) {
    size_t cap = ns->cap ? 2 * ns->cap : 16;
    char **v = realloc(ns->v, cap * sizeof *v);
    if (!v)
      return ST_ENOMEM;
    ns->v = v;
    ns->cap = cap;
  }
  return (ns->v[ns->n] = strdup(name)) ? (ns->n++, 0) : ST_ENOMEM;
}

/* Reads one stored build; NULL (after a warning) if it cannot be used. */
static struct build *load_build(st_build_queue *q, const char *name) {
  _cleanup_free_ uint8_t *data = NULL, *text = NULL;
  size_t len, tlen;
  st_error err = {0};
  struct build *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  int rc = st_store_meta_get(q->s, name, ST_BUILD_RECORD_MAX, &data, &len, &err);
  if (rc == ST_OK)
    rc = st_bq_record_parse(&b->info, (const char *)data, len, &err);
  char rname[128];
  if (rc == ST_OK) {
    meta_name(rname, sizeof rname, &b->info.id, "recipe");
    rc = st_store_meta_get(q->s, rname, ST_RECIPE_MAX_BYTES, &text, &tlen, &err);
  }
  if (rc < 0) {
    st_warn("build record %s: %s (skipped)", name, err.msg);
    build_free(b);
    return NULL;
  }
  b->info.req.recipe_text = (char *)ST_TAKE_PTR(text);
  b->info.req.recipe_len = tlen;
  b->next_seq = 1;
  return b;
}

static int by_submitted(const void *a, const void *b) {
  const struct build *x = *(struct build *const *)a, *y = *(struct build *const *)b;
  return (x->info.submitted > y->info.submitted) - (x->info.submitted < y->info.submitted);
}

static int recover(st_build_queue *q, st_error *err) {
  struct names ns = {0};
  int rc = st_store_meta_list(q->s, "builds", collect_record, &ns, err);
  if (rc == ST_ENOENT)
    rc = ST_OK; /* no build yet */
  for (size_t i = 0; i < ns.n && rc == ST_OK; i++) {
    struct build *b = load_build(q, ns.v[i]);
    if (b && find(q, &b->info.id)) {
      build_free(b);
      continue;
    }
    if (b && (rc = insert(q, b, err)) < 0)
      build_free(b);
  }
  for (size_t i = 0; i < ns.n; i++)
    free(ns.v[i]);
  free(ns.v);
  if (rc < 0)
    return rc;
  if (q->n_builds)
    qsort(q->builds, q->n_builds, sizeof *q->builds, by_submitted);
  st_dset_clear(q->by_id);
  for (size_t i = 0; i < q->n_builds && rc == ST_OK; i++) {
    struct build *b = q->builds[i];
    if (st_dset_insert(q->by_id, &b->info.id, i) < 0)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    if (b->info.state == ST_BUILD_RUNNING) {
      load_events(q, b);
      set_state(q, b, ST_BUILD_FAILED, ST_EUNAVAIL, "interrupted by server restart");
    } else if (b->info.state == ST_BUILD_QUEUED) {
      load_events(q, b);
      rc = enqueue(q, b, err);
    }
  }
  return rc;
}

int st_build_queue_open(st_build_queue **out, st_store *s, const st_build_queue_opts *o,
                        st_error *err) {
  st_build_queue *q = calloc(1, sizeof *q);
  if (!q)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  q->s = s;
  q->o = o ? *o : (st_build_queue_opts){0};
  if (!q->o.workers)
    q->o.workers = 1;
  if (!q->o.max_events)
    q->o.max_events = DEFAULT_MAX_EVENTS;
  const char *tmp = q->o.tmpdir ? q->o.tmpdir : getenv("TMPDIR");
  q->tmpdir = strdup(tmp && *tmp ? tmp : "/var/tmp");
  q->o.tmpdir = q->tmpdir;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->work, NULL);
  pthread_cond_init(&q->progress, NULL);
  q->by_id = st_dset_new();
  q->threads = calloc(q->o.workers, sizeof *q->threads);
  int rc = q->tmpdir && q->by_id && q->threads ? ST_OK
                                               : st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK) {
    pthread_mutex_lock(&q->lock);
    rc = recover(q, err);
    pthread_mutex_unlock(&q->lock);
  }
  for (unsigned i = 0; rc == ST_OK && i < q->o.workers; i++, q->n_threads++)
    if ((errno = pthread_create(&q->threads[i], NULL, worker_main, q)) != 0)
      rc = st_error_errno(err, errno, "build queue: cannot start a worker");
  if (rc < 0) {
    st_build_queue_free(q);
    return rc;
  }
  *out = q;
  return ST_OK;
}

void st_build_queue_free(st_build_queue *q) {
  if (!q)
    return;
  pthread_mutex_lock(&q->lock);
  q->stopping = true;
  for (size_t i = 0; i < q->n_builds; i++)
    if (q->builds[i]->info.state == ST_BUILD_RUNNING)
      atomic_store(&q->builds[i]->cancel, CANCEL_SHUTDOWN);
  pthread_cond_broadcast(&q->work);
  pthread_cond_broadcast(&q->progress);
  pthread_mutex_unlock(&q->lock);
  for (unsigned i = 0; i < q->n_threads; i++)
    pthread_join(q->threads[i], NULL);
  for (size_t i = 0; i < q->n_builds; i++)
    build_free(q->builds[i]);
  free(q->builds);
  free(q->fifo);
  free(q->threads);
  st_dset_free(q->by_id);
  pthread_cond_destroy(&q->work);
  pthread_cond_destroy(&q->progress);
  pthread_mutex_destroy(&q->lock);
  free(q->tmpdir);
  free(q);
}

/* ---- submit ---- */

void st_build_request_id(const st_build_request *req, st_digest *out) {
  st_hasher *h = st_hasher_new();
  if (!h) {
    abort(); /* nothing sensible to return: an id must never be made up */
  }
  char line[128], hex[ST_DIGEST_HEX_LEN + 1];
  const char *cells = req->cells ? req->cells : "";
  size_t name_len = req->recipe_name ? strlen(req->recipe_name) : 0;
  int n = snprintf(line, sizeof line, "strata-build-request 1\nrecipe-name %zu:", name_len);
  st_hasher_update(h, line, (size_t)n);
  st_hasher_update(h, req->recipe_name ? req->recipe_name : "", name_len);
  n = snprintf(line, sizeof line, "\nrecipe %zu:", req->recipe_len);
  st_hasher_update(h, line, (size_t)n);
  st_hasher_update(h, req->recipe_text ? req->recipe_text : "", req->recipe_len);
  n = req->has_context
          ? snprintf(line, sizeof line, "\ncontext sha256:%s", st_digest_hex(&req->context, hex))
          : snprintf(line, sizeof line, "\ncontext none");
  st_hasher_update(h, line, (size_t)n);
  n = snprintf(line, sizeof line, "\ncells %zu:", strlen(cells));
  st_hasher_update(h, line, (size_t)n);
  st_hasher_update(h, cells, strlen(cells));
  n = snprintf(line, sizeof line, "\nmtime %lld\n", (long long)req->mtime);
  st_hasher_update(h, line, (size_t)n);
  st_hasher_final(h, out);
  st_hasher_free(h);
}

/* The existing build an identical request gets (lock held): not after a failure. */
static struct build *reusable(st_build_queue *q, const st_digest *id) {
  struct build *b = find(q, id);
  return b && b->info.state != ST_BUILD_FAILED && b->info.state != ST_BUILD_CANCELLED ? b : NULL;
}

/* Queues b for a new attempt with ws (lock held; both consumed on success). */
static int queue_attempt(st_build_queue *q, struct build *b, struct workspace *ws,
                         st_error *err) {
  char name[128];
  meta_name(name, sizeof name, &b->info.id, "recipe");
  int rc = st_store_meta_put(q->s, name, b->info.req.recipe_text, b->info.req.recipe_len, err);
  if (rc < 0) {
    workspace_free(ws);
    return rc;
  }
  b->info.attempt++;
  b->info.submitted = wall_now();
  b->info.started = b->info.finished = 0;
  for (size_t i = 0; i < b->info.n_images; i++) {
    free(b->info.images[i].ref);
    free(b->info.images[i].cell);
  }
  free(b->info.images);
  b->info.images = NULL;
  b->info.n_images = 0;
  load_events(q, b); /* numbering continues after the earlier attempts */
  st_bevents_free(b->ev, b->n_ev);
  b->ev = NULL;
  b->n_ev = b->cap_ev = 0;
  workspace_free(b->ws);
  b->ws = ws;
  set_state(q, b, ST_BUILD_QUEUED, 0, NULL);
  return enqueue(q, b, err);
}

static int queue_submit(st_build_queue *q, const st_build_request *req, const st_digest *id,
                        struct workspace *ws, bool *existing, st_error *err) {
  struct build *b = reusable(q, id);
  if (b) { /* an identical request won the race while this one was checked */
    workspace_free(ws);
    *existing = true;
    return ST_OK;
  }
  *existing = false;
  b = find(q, id);
  if (b)
    return queue_attempt(q, b, ws, err);
  b = calloc(1, sizeof *b);
  if (!b || st_build_info_copy(&b->info, &(st_build_info){.req = *req}) < 0) {
    free(b);
    workspace_free(ws);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  b->info.id = *id;
  b->ev_loaded = true;
  b->next_seq = 1;
  int rc = insert(q, b, err);
  if (rc < 0) {
    build_free(b);
    workspace_free(ws);
    return rc;
  }
  return queue_attempt(q, b, ws, err);
}

int st_build_queue_submit(st_build_queue *q, const st_build_request *req, st_digest *id_out,
                          bool *existing_out, st_error *err) {
  int rc = st_build_request_check(req, err);
  if (rc < 0)
    return rc;
  st_digest id;
  st_build_request_id(req, &id);
  pthread_mutex_lock(&q->lock);
  bool existing = reusable(q, &id) != NULL;
  pthread_mutex_unlock(&q->lock);
  if (!existing) {
    /* check everything before anything is recorded: materialise and instantiate */
    struct workspace *ws = NULL;
    rc = workspace_new(q, req, &ws, err);
    st_recipe_instance **v = NULL;
    size_t n = 0;
    if (rc == ST_OK)
      rc = st_build_context_instances(ws->ctx, req, &v, &n, err);
    st_build_instances_free(v, n);
    if (rc < 0) {
      workspace_free(ws);
      return rc;
    }
    pthread_mutex_lock(&q->lock);
    rc = q->stopping ? st_error_set(err, ST_EUNAVAIL, "the build queue is shutting down")
                     : queue_submit(q, req, &id, ws, &existing, err);
    if (rc < 0 && q->stopping)
      workspace_free(ws);
    pthread_mutex_unlock(&q->lock);
    if (rc < 0)
      return rc;
    notify(q, &id);
  }
  if (id_out)
    *id_out = id;
  if (existing_out)
    *existing_out = existing;
  return ST_OK;
}

/* ---- queries ---- */

static int not_found(const st_digest *id, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  return st_error_set(err, ST_ENOENT, "build sha256:%s not found", st_digest_hex(id, hex));
}

int st_build_queue_get(st_build_queue *q, const st_digest *id, st_build_info **out,
                       st_error *err) {
  st_build_info *info = calloc(1, sizeof *info);
  if (!info)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  pthread_mutex_lock(&q->lock);
  struct build *b = find(q, id);
  int rc = !b ? not_found(id, err)
               : st_build_info_copy(info, &b->info) < 0
                   ? st_error_set(err, ST_ENOMEM, "out of memory")
                   : ST_OK;
  pthread_mutex_unlock(&q->lock);
  if (rc < 0) {
    free(info);
    return rc;
  }
  *out = info;
  return ST_OK;
}

int st_build_queue_list(st_build_queue *q, st_build_info ***out, size_t *n_out,
                        st_error *err) {
  pthread_mutex_lock(&q->lock);
  size_t n = q->n_builds;
  st_build_info **v = calloc(n + 1, sizeof *v);
  int rc = v ? ST_OK : st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n && rc == ST_OK; i++)
    if (!(v[i] = calloc(1, sizeof **v)) || st_build_info_copy(v[i], &q->builds[i]->info) < 0)
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
  pthread_mutex_unlock(&q->lock);
  if (rc < 0) {
    st_build_infos_free(v, n);
    return rc;
  }
  *out = v;
  *n_out = n;
  return ST_OK;
}

int st_build_queue_cancel(st_build_queue *q, const st_digest *id, st_build_state *state_out,
                          st_error *err) {
  pthread_mutex_lock(&q->lock);
  struct build *b = find(q, id);
  if (!b) {
    pthread_mutex_unlock(&q->lock);
    return not_found(id, err);
  }
  bool changed = false;
  if (b->info.state == ST_BUILD_QUEUED) {
    workspace_free(b->ws);
    b->ws = NULL;
    set_state(q, b, ST_BUILD_CANCELLED, ST_ECANCELED, "cancelled before it started");
    changed = true;
  } else if (b->info.state == ST_BUILD_RUNNING) {
    atomic_store(&b->cancel, CANCEL_USER);
  }
  st_build_state st = b->info.state;
  pthread_mutex_unlock(&q->lock);
  if (changed)
    notify(q, id);
  if (state_out)
    *state_out = st;
  return ST_OK;
}

/* Copies the events after `after` (lock held). */
static int copy_events(struct build *b, uint64_t after, st_bevent **out, size_t *n_out) {
  size_t first = b->n_ev;
  while (first > 0 && b->ev[first - 1].seq > after)
    first--;
  size_t n = b->n_ev - first;
  *out = NULL;
  *n_out = 0;
  if (n == 0)
    return ST_OK;
  st_bevent *v = calloc(n, sizeof *v);
  if (!v)
    return ST_ENOMEM;
  for (size_t i = 0; i < n; i++)
    if (st_bevent_copy(&v[i], &b->ev[first + i]) < 0) {
      st_bevents_free(v, i);
      return ST_ENOMEM;
    }
  *out = v;
  *n_out = n;
  return ST_OK;
}

int st_build_queue_events(st_build_queue *q, const st_digest *id, uint64_t after,
                          int timeout_ms, st_bevent **out, size_t *n_out, bool *done_out,
                          st_error *err) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  if (timeout_ms > 0) {
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000;
    }
  }
  pthread_mutex_lock(&q->lock);
  int rc = ST_OK;
  for (;;) {
    struct build *b = find(q, id);
    if (!b) {
      rc = not_found(id, err);
      break;
    }
    load_events(q, b);
    if (copy_events(b, after, out, n_out) < 0) {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
      break;
    }
    bool final = st_build_state_final(b->info.state);
    if (*n_out || final || timeout_ms == 0 || q->stopping) {
      *done_out = final;
      break;
    }
    if (timeout_ms < 0)
      pthread_cond_wait(&q->progress, &q->lock);
    else if (pthread_cond_timedwait(&q->progress, &q->lock, &deadline) == ETIMEDOUT)
      timeout_ms = 0; /* one last look */
  }
  pthread_mutex_unlock(&q->lock);
  return rc;
}

void st_build_queue_counts(st_build_queue *q, size_t counts[ST_BUILD_STATE_COUNT]) {
  for (int i = 0; i < ST_BUILD_STATE_COUNT; i++)
    counts[i] = 0;
  pthread_mutex_lock(&q->lock);
  for (size_t i = 0; i < q->n_builds; i++)
    if ((unsigned)q->builds[i]->info.state < ST_BUILD_STATE_COUNT)
      counts[q->builds[i]->info.state]++;
  pthread_mutex_unlock(&q->lock);
}
