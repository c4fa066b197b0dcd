/* SPDX-License-Identifier: Apache-2.0 */
/* The client side of the Builds service (client.h): Submit, Watch, Get,
 * Cancel and List, with the API messages turned into the build queue's own
 * types (builder/queue.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-private.h"
#include "queue.h"

static st_build_state from_api_state(Strata__V1__BuildState s) {
  switch (s) {
  case STRATA__V1__BUILD_STATE__BUILD_STATE_RUNNING: return ST_BUILD_RUNNING;
  case STRATA__V1__BUILD_STATE__BUILD_STATE_SUCCEEDED: return ST_BUILD_SUCCEEDED;
  case STRATA__V1__BUILD_STATE__BUILD_STATE_FAILED: return ST_BUILD_FAILED;
  case STRATA__V1__BUILD_STATE__BUILD_STATE_CANCELED: return ST_BUILD_CANCELLED;
  default: return ST_BUILD_QUEUED;
  }
}

static bool copy_str(char **dst, const char *src) {
  return (*dst = strdup(src ? src : "")) != NULL;
}

static void digest_of(st_digest *out, const ProtobufCBinaryData *b) {
  memset(out, 0, sizeof *out);
  if (b->len == ST_DIGEST_LEN)
    memcpy(out->bytes, b->data, ST_DIGEST_LEN);
}

/* A BuildInfo as an st_build_info (*out owned by the caller). */
static int from_info(st_build_info **out, const Strata__V1__BuildInfo *m, st_error *err) {
  st_build_info *info = calloc(1, sizeof *info);
  bool ok = info != NULL;
  if (ok) {
    st_digest_parse(&info->id, m->build_id, NULL);
    info->state = from_api_state(m->state);
    info->submitted = (double)m->submitted_unix;
    info->finished = (double)m->finished_unix;
    ok = copy_str(&info->req.recipe_name, m->recipe_name) &&
         (!m->error[0] || copy_str(&info->error, m->error));
    if (ok && m->n_images)
      ok = (info->images = calloc(m->n_images, sizeof *info->images)) != NULL;
    for (size_t i = 0; ok && i < m->n_images; i++, info->n_images++) {
      const Strata__V1__BuildImage *bi = m->images[i];
      st_build_image *im = &info->images[i];
      digest_of(&im->digest, &bi->digest);
      ok = asprintf(&im->ref, "%s:%s", bi->name, bi->tag) > 0 && copy_str(&im->cell, bi->cell);
    }
  }
  if (!ok) {
    st_build_info_free(info);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  *out = info;
  return ST_OK;
}

static void from_layer(st_bevent *ev, const Strata__V1__LayerProgress *m) {
  *ev = (st_bevent){.kind = ST_BEV_LAYER,
                    .layer_state = m->state > 0 ? (st_layer_state)(m->state - 1) : ST_LAYER_QUEUED,
                    .cell = m->cell, .layer = m->layer, .index = m->index, .count = m->count,
                    .bytes = m->bytes, .seconds = m->seconds,
                    .text = m->error && m->error[0] ? m->error : NULL};
  digest_of(&ev->digest, &m->digest);
}

int st_client_build_submit(st_client *c, const st_build_request *req, char id_out[72],
                           bool *existing_out, st_error *err) {
  Strata__V1__SubmitRequest m = STRATA__V1__SUBMIT_REQUEST__INIT;
  m.recipe = req->recipe_text;
  m.recipe_name = req->recipe_name;
  m.source_date_epoch = req->mtime;
  Strata__V1__BuildInput in = STRATA__V1__BUILD_INPUT__INIT;
  Strata__V1__BuildInput *inputs[1] = {&in};
  if (req->has_context) {
    in.name = (char *)"context";
    in.kind = STRATA__V1__OBJECT_KIND__OBJECT_KIND_INDEX;
    in.digest = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)req->context.bytes};
    m.n_inputs = 1;
    m.inputs = inputs;
  }
  /* the filter "k=v,k=v" travels as its KEY=VALUE parts */
  char *copy = req->cells && *req->cells ? strdup(req->cells) : NULL;
  size_t n = 0;
  for (const char *p = copy; p && *p; p++)
    n += *p == ',';
  char **v = copy ? calloc(n + 1, sizeof *v) : NULL;
  if (req->cells && *req->cells && (!copy || !v)) {
    free(copy);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  char *save = NULL;
  for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && m.n_cells <= n;
       t = strtok_r(NULL, ",", &save))
    v[m.n_cells++] = t;
  m.cells = v;
  Strata__V1__SubmitResponse *resp = NULL;
  int r = cl_unary(c, "/strata.v1.Builds/Submit", &m.base,
                   &strata__v1__submit_response__descriptor, (ProtobufCMessage **)&resp, err);
  free(v);
  free(copy);
  if (r < 0)
    return r;
  snprintf(id_out, 72, "%s", resp->build_id);
  if (existing_out)
    *existing_out = resp->existing;
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  return ST_OK;
}

/* One Watch message to the callback; *last keeps the latest state. */
static int deliver(const Strata__V1__BuildEvent *m, st_client_watch_fn fn, void *ud,
                   st_build_info **last, st_error *err) {
  if (m->event_case == STRATA__V1__BUILD_EVENT__EVENT_BUILD && m->build) {
    st_build_info *info = NULL;
    int r = from_info(&info, m->build, err);
    if (r < 0)
      return r;
    st_build_info_free(*last);
    *last = info;
    return fn ? fn(info, NULL, ud) : ST_OK;
  }
  st_bevent ev;
  if (m->event_case == STRATA__V1__BUILD_EVENT__EVENT_LAYER && m->layer)
    from_layer(&ev, m->layer);
  else if (m->event_case == STRATA__V1__BUILD_EVENT__EVENT_LOG_LINE)
    ev = (st_bevent){.kind = ST_BEV_LOG, .text = m->log_line};
  else
    return ST_OK; /* something newer than this client */
  return fn ? fn(NULL, &ev, ud) : ST_OK;
}

int st_client_build_watch(st_client *c, const char *id, st_client_watch_fn fn, void *ud,
                          st_build_info **final_out, st_error *err) {
  Strata__V1__WatchRequest req = STRATA__V1__WATCH_REQUEST__INIT;
  req.build_id = (char *)id;
  cl_call call;
  st_build_info *last = NULL;
  int r = cl_call_start(&call, c, "/strata.v1.Builds/Watch", err);
  if (r == ST_OK)
    r = cl_call_send(&call, &req.base, err);
  if (r == ST_OK)
    r = cl_call_close_send(&call, err);
  while (r == ST_OK) {
    ProtobufCMessage *m = NULL;
    int got = cl_call_recv(&call, &strata__v1__build_event__descriptor, &m, err);
    if (got <= 0) {
      r = got;
      break;
    }
    r = deliver((Strata__V1__BuildEvent *)m, fn, ud, &last, err);
    protobuf_c_message_free_unpacked(m, NULL);
  }
  r = cl_call_finish(&call, r, err);
  if (r == ST_OK && (!last || !st_build_state_final(last->state)))
    r = st_error_set(err, ST_EIO, "the watch of build %s ended before the build", id);
  if (r == ST_OK && final_out)
    *final_out = last;
  else
    st_build_info_free(last);
  return r;
}

static int info_call(st_client *c, const char *method, const ProtobufCMessage *req,
                     st_build_info **out, st_error *err) {
  Strata__V1__BuildInfo *resp = NULL;
  int r = cl_unary(c, method, req, &strata__v1__build_info__descriptor,
                   (ProtobufCMessage **)&resp, err);
  if (r < 0)
    return r;
  r = from_info(out, resp, err);
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  return r;
}

int st_client_build_get(st_client *c, const char *id, st_build_info **out, st_error *err) {
  Strata__V1__GetBuildRequest req = STRATA__V1__GET_BUILD_REQUEST__INIT;
  req.build_id = (char *)id;
  return info_call(c, "/strata.v1.Builds/Get", &req.base, out, err);
}

int st_client_build_cancel(st_client *c, const char *id, st_build_info **out, st_error *err) {
  Strata__V1__CancelBuildRequest req = STRATA__V1__CANCEL_BUILD_REQUEST__INIT;
  req.build_id = (char *)id;
  return info_call(c, "/strata.v1.Builds/Cancel", &req.base, out, err);
}

int st_client_build_list(st_client *c, st_build_info ***out, size_t *n_out, st_error *err) {
  Strata__V1__ListBuildsRequest req = STRATA__V1__LIST_BUILDS_REQUEST__INIT;
  Strata__V1__ListBuildsResponse *resp = NULL;
  int r = cl_unary(c, "/strata.v1.Builds/List", &req.base,
                   &strata__v1__list_builds_response__descriptor, (ProtobufCMessage **)&resp,
                   err);
  if (r < 0)
    return r;
  st_build_info **v = calloc(resp->n_builds + 1, sizeof *v);
  size_t n = 0;
  if (!v)
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; r == ST_OK && i < resp->n_builds; i++)
    if ((r = from_info(&v[i], resp->builds[i], err)) == ST_OK)
      n++;
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  if (r < 0) {
    st_build_infos_free(v, n);
    return r;
  }
  *out = v;
  *n_out = n;
  return ST_OK;
}
