/* SPDX-License-Identifier: Apache-2.0 */
/* Status.Get: uptime and every server counter (calls, bytes in/out, chunks
 * served and received, FindMissing hit ratio, and whatever other services
 * count, e.g. builds by state), as metrics and as "name value" text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "strata-config.h"
#include "svc-private.h"

#define MAX_METRICS 80

struct collect {
  Strata__V1__Metric m[MAX_METRICS];
  Strata__V1__Metric *p[MAX_METRICS];
  size_t n;
  char text[8192];
  size_t tlen;
};

static void add(const char *name, uint64_t v, void *ud) {
  struct collect *c = ud;
  if (c->n == MAX_METRICS)
    return;
  strata__v1__metric__init(&c->m[c->n]);
  c->m[c->n].name = (char *)name;
  c->m[c->n].value = v;
  c->p[c->n] = &c->m[c->n];
  c->n++;
  if (c->tlen < sizeof c->text) {
    int n = snprintf(c->text + c->tlen, sizeof c->text - c->tlen, "%s %llu\n", name,
                     (unsigned long long)v);
    if (n > 0)
      c->tlen += (size_t)n;
  }
}

static int get_status(st_rpc_call *c, void *ud, st_error *err) {
  ProtobufCMessage *req;
  int r = st_rpc_recv(c, &strata__v1__status_request__descriptor, &req, err);
  if (r <= 0)
    return r < 0 ? r : st_error_set(err, ST_EINVAL, "missing request");
  protobuf_c_message_free_unpacked(req, NULL);
  st_server *srv = st_rpc_server(c);
  _cleanup_free_ struct collect *col = calloc(1, sizeof *col);
  if (!col)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  st_server_counters(srv, add, col);
  uint64_t present = 0, absent = 0;
  for (size_t i = 0; i < col->n; i++) {
    if (!strcmp(col->m[i].name, "find_missing_present"))
      present = col->m[i].value;
    if (!strcmp(col->m[i].name, "find_missing_absent"))
      absent = col->m[i].value;
  }
  add("hit_ratio_permille", present + absent ? present * 1000 / (present + absent) : 0, col);
  Strata__V1__StatusResponse resp = STRATA__V1__STATUS_RESPONSE__INIT;
  resp.server_version = STRATA_VERSION;
  resp.uptime_seconds = st_server_uptime(srv);
  resp.n_metrics = col->n;
  resp.metrics = col->p;
  resp.text = col->text;
  return st_rpc_send(c, &resp.base, err);
}

static const st_rpc_method methods[] = {
    {"/strata.v1.Status/Get", ST_ROLE_PULL, get_status},
};

int st_svc_status_register(st_server *srv, st_error *err) {
  return st_server_add_service(srv, "Status", methods, ST_ARRAY_SIZE(methods), NULL, NULL, err);
}
