/* SPDX-License-Identifier: Apache-2.0 */
/* The Builds service: Submit, Watch, Get, List and Cancel over the build queue
 * (builder/queue.h), which runs builds on the server's store with
 * `strata serve --builds N` workers. Builds go on when watchers go away; the
 * queue's records survive restarts (docs/BUILDS.md). Publishes the gauges
 * builds_queued, builds_running, builds_succeeded, builds_failed and
 * builds_cancelled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "fs.h"
#include "image.h"
#include "log.h"
#include "pool.h"
#include "queue.h"
#include "svc-private.h"

/* A Watch without news lets gRPC work on its worker for this long at a time
 * (st_rpc_wait), then looks for events again. */
#define WATCH_POLL_MS 100
/* A Watch sends the build's state again after this long without events, so
 * that a client that went away is noticed. */
#define WATCH_HEARTBEAT_S 15.0

struct builds {
  st_server *srv;
  st_build_queue *q;
};

static const char *const gauge_names[ST_BUILD_STATE_COUNT] = {
    "builds_queued", "builds_running", "builds_succeeded", "builds_failed", "builds_cancelled",
};

static void publish(const st_digest *id, void *ud) {
  struct builds *b = ud;
  size_t counts[ST_BUILD_STATE_COUNT];
  st_build_queue_counts(b->q, counts);
  for (int i = 0; i < ST_BUILD_STATE_COUNT; i++)
    st_server_gauge(b->srv, gauge_names[i], counts[i]);
}

/* ---- conversions ---- */

static Strata__V1__BuildState api_state(st_build_state s) {
  switch (s) {
  case ST_BUILD_QUEUED: return STRATA__V1__BUILD_STATE__BUILD_STATE_QUEUED;
  case ST_BUILD_RUNNING: return STRATA__V1__BUILD_STATE__BUILD_STATE_RUNNING;
  case ST_BUILD_SUCCEEDED: return STRATA__V1__BUILD_STATE__BUILD_STATE_SUCCEEDED;
  case ST_BUILD_FAILED: return STRATA__V1__BUILD_STATE__BUILD_STATE_FAILED;
  default: return STRATA__V1__BUILD_STATE__BUILD_STATE_CANCELED;
  }
}

static Strata__V1__LayerState api_layer_state(st_layer_state s) {
  return (Strata__V1__LayerState)((int)s + 1); /* same order, UNSPECIFIED first */
}

static int parse_id(st_digest *out, const char *text, st_error *err) {
  if (st_digest_parse(out, text ? text : "", NULL) < 0)
    return st_error_set(err, ST_EINVAL, "build id '%.80s' is not sha256:<64 hex digits>",
                        text ? text : "");
  return ST_OK;
}

/* A LayerProgress that borrows from ev. */
static void layer_msg(Strata__V1__LayerProgress *m, const st_bevent *ev) {
  strata__v1__layer_progress__init(m);
  m->cell = ev->cell ? ev->cell : (char *)"";
  m->layer = ev->layer ? ev->layer : (char *)"";
  m->state = api_layer_state(ev->layer_state);
  m->bytes = ev->bytes;
  m->seconds = ev->seconds;
  if (ev->layer_state == ST_LAYER_CACHED || ev->layer_state == ST_LAYER_DONE)
    m->digest = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)ev->digest.bytes};
  m->index = ev->index;
  m->count = ev->count;
  if (ev->layer_state == ST_LAYER_FAILED && ev->text)
    m->error = ev->text;
}

/* A BuildInfo message with everything it points to, borrowed from an
 * st_build_info and an event list (owned here). */
struct info_msg {
  Strata__V1__BuildInfo m;
  char id[8 + ST_DIGEST_HEX_LEN];
  st_bevent *ev;
  size_t n_ev;
  Strata__V1__LayerProgress *layers;
  Strata__V1__LayerProgress **layer_ptrs;
  Strata__V1__BuildImage *images;
  Strata__V1__BuildImage **image_ptrs;
  char **names, **tags;
};

static void info_msg_clear(struct info_msg *im, size_t n_images) {
  st_bevents_free(im->ev, im->n_ev);
  free(im->layers);
  free(im->layer_ptrs);
  free(im->images);
  free(im->image_ptrs);
  for (size_t i = 0; im->names && i < n_images; i++)
    free(im->names[i]), free(im->tags[i]);
  free(im->names);
  free(im->tags);
}

/* The latest state of each layer, in the order the layers first appear. */
static int fold_layers(struct info_msg *im, st_error *err) {
  im->layers = calloc(im->n_ev + 1, sizeof *im->layers);
  im->layer_ptrs = calloc(im->n_ev + 1, sizeof *im->layer_ptrs);
  if (!im->layers || !im->layer_ptrs)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  size_t n = 0;
  for (size_t i = 0; i < im->n_ev; i++) {
    const st_bevent *ev = &im->ev[i];
    if (ev->kind != ST_BEV_LAYER)
      continue;
    size_t k = 0;
    while (k < n && (strcmp(im->layers[k].cell, ev->cell) || strcmp(im->layers[k].layer, ev->layer)))
      k++;
    layer_msg(&im->layers[k], ev);
    im->layer_ptrs[k] = &im->layers[k];
    if (k == n)
      n++;
  }
  im->m.n_layers = n;
  im->m.layers = im->layer_ptrs;
  return ST_OK;
}

static int info_msg_build(struct info_msg *im, st_build_queue *q, const st_build_info *info,
                          bool with_layers, st_error *err) {
  strata__v1__build_info__init(&im->m);
  char hex[ST_DIGEST_HEX_LEN + 1];
  snprintf(im->id, sizeof im->id, "sha256:%s", st_digest_hex(&info->id, hex));
  im->m.build_id = im->id;
  im->m.state = api_state(info->state);
  im->m.recipe_name = info->req.recipe_name;
  im->m.submitted_unix = (int64_t)info->submitted;
  im->m.finished_unix = (int64_t)info->finished;
  im->m.error = info->error ? info->error : (char *)"";
  if (with_layers) {
    bool done;
    int r = st_build_queue_events(q, &info->id, 0, 0, &im->ev, &im->n_ev, &done, err);
    if (r == ST_OK)
      r = fold_layers(im, err);
    if (r < 0)
      return r;
  }
  size_t n = info->n_images;
  im->images = calloc(n + 1, sizeof *im->images);
  im->image_ptrs = calloc(n + 1, sizeof *im->image_ptrs);
  im->names = calloc(n + 1, sizeof *im->names);
  im->tags = calloc(n + 1, sizeof *im->tags);
  if (!im->images || !im->image_ptrs || !im->names || !im->tags)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    Strata__V1__BuildImage *bi = &im->images[i];
    strata__v1__build_image__init(bi);
    int r = st_image_ref_parse(info->images[i].ref, &im->names[i], &im->tags[i], err);
    if (r < 0)
      return r;
    bi->cell = info->images[i].cell ? info->images[i].cell : (char *)"";
    bi->name = im->names[i];
    bi->tag = im->tags[i];
    bi->digest = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)info->images[i].digest.bytes};
    im->image_ptrs[i] = bi;
  }
  im->m.n_images = n;
  im->m.images = im->image_ptrs;
  return ST_OK;
}

/* Sends the build's current record as a BuildInfo. */
static int send_info(st_rpc_call *c, st_build_queue *q, const st_digest *id, bool with_layers,
                     st_build_state *state_out, st_error *err) {
  st_build_info *info = NULL;
  int r = st_build_queue_get(q, id, &info, err);
  if (r < 0)
    return r;
  struct info_msg im = {0};
  r = info_msg_build(&im, q, info, with_layers, err);
  if (r == ST_OK)
    r = st_rpc_send(c, &im.m.base, err);
  if (state_out)
    *state_out = info->state;
  info_msg_clear(&im, info->n_images);
  st_build_info_free(info);
  return r;
}

static int recv_one(st_rpc_call *c, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                    st_error *err) {
  int r = st_rpc_recv(c, desc, out, err);
  if (r == 0)
    return st_error_set(err, ST_EINVAL, "missing %s", desc->name);
  return r < 0 ? r : ST_OK;
}

/* ---- Submit ---- */

/* The request's cells as one filter "k=v,k=v" (NULL for none). */
static int join_cells(char **out, char **cells, size_t n, st_error *err) {
  *out = NULL;
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strchr(cells[i], '=') || strchr(cells[i], ','))
      return st_error_set(err, ST_EINVAL, "cell '%.80s' is not KEY=VALUE", cells[i]);
    len += strlen(cells[i]) + 1;
  }
  if (n == 0)
    return ST_OK;
  if (len > 4096)
    return st_error_set(err, ST_EINVAL, "cells: longer than 4096 bytes");
  char *s = calloc(len, 1);
  if (!s)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    if (i)
      strcat(s, ",");
    strcat(s, cells[i]);
  }
  *out = s;
  return ST_OK;
}

static int to_request(st_build_request *req, const Strata__V1__SubmitRequest *m, st_error *err) {
  *req = (st_build_request){.mtime = m->source_date_epoch};
  if (m->source_date_epoch < 0)
    return st_error_set(err, ST_EINVAL, "source_date_epoch %lld is negative",
                        (long long)m->source_date_epoch);
  if (m->n_inputs > 1)
    return st_error_set(err, ST_EINVAL,
                        "%zu inputs: a build takes one, the build context (docs/BUILDS.md)",
                        m->n_inputs);
  if (m->n_inputs == 1) {
    const Strata__V1__BuildInput *in = m->inputs[0];
    if (strcmp(in->name, "context") || in->kind != STRATA__V1__OBJECT_KIND__OBJECT_KIND_INDEX)
      return st_error_set(err, ST_EINVAL,
                          "input '%.80s': expected the build context (name \"context\", kind "
                          "INDEX)",
                          in->name);
    int r = svc_digest(&req->context, &in->digest, "context digest", err);
    if (r < 0)
      return r;
    req->has_context = true;
  }
  req->recipe_name = m->recipe_name;
  req->recipe_text = m->recipe;
  req->recipe_len = strlen(m->recipe);
  return join_cells(&req->cells, m->cells, m->n_cells, err);
}

static int submit(st_rpc_call *c, void *ud, st_error *err) {
  struct builds *b = ud;
  Strata__V1__SubmitRequest *m;
  int r = recv_one(c, &strata__v1__submit_request__descriptor, (ProtobufCMessage **)&m, err);
  if (r < 0)
    return r;
  st_build_request req;
  st_digest id;
  bool existing = false;
  r = to_request(&req, m, err);
  if (r == ST_OK)
    r = st_build_queue_submit(b->q, &req, &id, &existing, err);
  free(req.cells);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  if (r < 0)
    return r;
  char hex[ST_DIGEST_HEX_LEN + 1], text[8 + ST_DIGEST_HEX_LEN];
  snprintf(text, sizeof text, "sha256:%s", st_digest_hex(&id, hex));
  st_info("build %s %s by %s", text, existing ? "resubmitted" : "submitted",
          st_rpc_identity(c));
  Strata__V1__SubmitResponse resp = STRATA__V1__SUBMIT_RESPONSE__INIT;
  resp.build_id = text;
  resp.existing = existing;
  return st_rpc_send(c, &resp.base, err);
}

/* ---- Get, List, Cancel ---- */

static int get(st_rpc_call *c, void *ud, st_error *err) {
  struct builds *b = ud;
  Strata__V1__GetBuildRequest *m;
  int r = recv_one(c, &strata__v1__get_build_request__descriptor, (ProtobufCMessage **)&m, err);
  if (r < 0)
    return r;
  st_digest id;
  r = parse_id(&id, m->build_id, err);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  return r < 0 ? r : send_info(c, b->q, &id, true, NULL, err);
}

static int cancel(st_rpc_call *c, void *ud, st_error *err) {
  struct builds *b = ud;
  Strata__V1__CancelBuildRequest *m;
  int r = recv_one(c, &strata__v1__cancel_build_request__descriptor, (ProtobufCMessage **)&m,
                   err);
  if (r < 0)
    return r;
  st_digest id;
  r = parse_id(&id, m->build_id, err);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  st_build_state before = ST_BUILD_QUEUED;
  if (r == ST_OK)
    r = st_build_queue_cancel(b->q, &id, &before, err);
  char hex[ST_DIGEST_HEX_LEN + 1];
  if (r == ST_OK && !st_build_state_final(before))
    st_info("build sha256:%s cancelled by %s", st_digest_hex(&id, hex), st_rpc_identity(c));
  return r < 0 ? r : send_info(c, b->q, &id, true, NULL, err);
}

static int list(st_rpc_call *c, void *ud, st_error *err) {
  struct builds *b = ud;
  Strata__V1__ListBuildsRequest *m;
  int r = recv_one(c, &strata__v1__list_builds_request__descriptor, (ProtobufCMessage **)&m, err);
  if (r < 0)
    return r;
  Strata__V1__BuildState want = m->state;
  protobuf_c_message_free_unpacked(&m->base, NULL);
  st_build_info **v = NULL;
  size_t n = 0;
  if ((r = st_build_queue_list(b->q, &v, &n, err)) < 0)
    return r;
  struct info_msg *ims = calloc(n + 1, sizeof *ims);
  Strata__V1__BuildInfo **ptrs = calloc(n + 1, sizeof *ptrs);
  size_t k = 0;
  if (!ims || !ptrs)
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n && r == ST_OK; i++) {
    if (want && api_state(v[i]->state) != want)
      continue;
    /* without the per-layer states: a listing stays small */
    r = info_msg_build(&ims[k], b->q, v[i], false, err);
    ptrs[k] = &ims[k].m;
    ims[k].n_ev = i; /* remembers which info it borrows from, for clearing */
    k++;
  }
  if (r == ST_OK) {
    Strata__V1__ListBuildsResponse resp = STRATA__V1__LIST_BUILDS_RESPONSE__INIT;
    resp.n_builds = k;
    resp.builds = ptrs;
    r = st_rpc_send(c, &resp.base, err);
  }
  for (size_t i = 0; ims && i < k; i++) {
    size_t src = ims[i].n_ev;
    ims[i].n_ev = 0;
    info_msg_clear(&ims[i], v[src]->n_images);
  }
  free(ims);
  free(ptrs);
  st_build_infos_free(v, n);
  return r;
}

/* ---- Watch ---- */

static int send_event(st_rpc_call *c, const st_bevent *ev, st_error *err) {
  Strata__V1__BuildEvent m = STRATA__V1__BUILD_EVENT__INIT;
  Strata__V1__LayerProgress lp;
  if (ev->kind == ST_BEV_LAYER) {
    layer_msg(&lp, ev);
    m.event_case = STRATA__V1__BUILD_EVENT__EVENT_LAYER;
    m.layer = &lp;
  } else if (ev->kind == ST_BEV_LOG) {
    m.event_case = STRATA__V1__BUILD_EVENT__EVENT_LOG_LINE;
    m.log_line = ev->text ? ev->text : (char *)"";
  } else {
    return ST_OK; /* states and images: sent as BuildInfo */
  }
  return st_rpc_send(c, &m.base, err);
}

/* The build's current record as a BuildEvent. */
static int send_state(st_rpc_call *c, st_build_queue *q, const st_digest *id, bool final,
                      st_error *err) {
  st_build_info *info = NULL;
  int r = st_build_queue_get(q, id, &info, err);
  if (r < 0)
    return r;
  struct info_msg im = {0};
  r = info_msg_build(&im, q, info, final, err);
  if (r == ST_OK) {
    Strata__V1__BuildEvent m = STRATA__V1__BUILD_EVENT__INIT;
    m.event_case = STRATA__V1__BUILD_EVENT__EVENT_BUILD;
    m.build = &im.m;
    r = st_rpc_send(c, &m.base, err);
  }
  info_msg_clear(&im, info->n_images);
  st_build_info_free(info);
  return r;
}

static int watch(st_rpc_call *c, void *ud, st_error *err) {
  struct builds *b = ud;
  Strata__V1__WatchRequest *m;
  int r = recv_one(c, &strata__v1__watch_request__descriptor, (ProtobufCMessage **)&m, err);
  if (r < 0)
    return r;
  st_digest id;
  r = parse_id(&id, m->build_id, err);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  if (r == ST_OK) /* the current state first, then the history and what follows */
    r = send_state(c, b->q, &id, false, err);
  uint64_t after = 0;
  double quiet_since = st_now();
  bool done = false;
  while (r == ST_OK && !done) {
    if (st_server_stopping(b->srv))
      return st_error_set(err, ST_EUNAVAIL, "the server is shutting down");
    st_bevent *v = NULL;
    size_t n = 0;
    r = st_build_queue_events(b->q, &id, after, 0, &v, &n, &done, err);
    if (r == ST_OK && n == 0 && !done && st_rpc_wait(c, WATCH_POLL_MS))
      return st_error_set(err, ST_ECANCELED, "client went away");
    for (size_t i = 0; i < n && r == ST_OK; i++) {
      r = v[i].kind == ST_BEV_STATE && !st_build_state_final(v[i].state)
              ? send_state(c, b->q, &id, false, err)
              : send_event(c, &v[i], err);
      after = v[i].seq;
    }
    st_bevents_free(v, n);
    if (n)
      quiet_since = st_now();
    else if (r == ST_OK && !done && st_now() - quiet_since > WATCH_HEARTBEAT_S) {
      r = send_state(c, b->q, &id, false, err);
      quiet_since = st_now();
    }
  }
  if (r == ST_OK) /* the final state, with images and every layer */
    r = send_state(c, b->q, &id, true, err);
  return r;
}

/* ---- registration ---- */

static const st_rpc_method methods[] = {
    {"/strata.v1.Builds/Submit", ST_ROLE_BUILD, submit},
    {"/strata.v1.Builds/Cancel", ST_ROLE_BUILD, cancel},
    {"/strata.v1.Builds/Watch", ST_ROLE_PULL, watch},
    {"/strata.v1.Builds/Get", ST_ROLE_PULL, get},
    {"/strata.v1.Builds/List", ST_ROLE_PULL, list},
};

static void builds_free(void *ud) {
  struct builds *b = ud;
  if (!b)
    return;
  st_build_queue_free(b->q); /* running builds go back to the queue */
  free(b);
}

int st_svc_builds_register(st_server *srv, st_error *err) {
  struct builds *b = calloc(1, sizeof *b);
  if (!b)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  b->srv = srv;
  const st_server_config *cfg = st_server_get_config(srv);
  st_build_queue_opts o = {.workers = cfg->builds ? cfg->builds : 1,
                           .threads = st_cpu_count()};
  int r = st_build_queue_open(&b->q, st_server_store(srv), &o, err);
  if (r < 0) {
    free(b);
    return st_error_prefix(err, "build queue");
  }
  st_build_queue_set_notify(b->q, publish, b);
  publish(NULL, b);
  return st_server_add_service(srv, "Builds", methods, ST_ARRAY_SIZE(methods), b, builds_free,
                               err);
}
