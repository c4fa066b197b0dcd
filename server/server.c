/* SPDX-License-Identifier: Apache-2.0 */
/* The server framework (rpc.h) on the gRPC C core. Each worker thread owns a
 * completion queue with one request_call posted; a new call is served to the
 * end on that thread, so every event on the queue meanwhile belongs to it:
 *
 *   worker_main: request_call ──ok──> serve_call: RECV_CLOSE_ON_SERVER posted,
 *     method lookup (UNIMPLEMENTED), auth (UNAUTHENTICATED / PERMISSION_DENIED),
 *     handler (st_rpc_recv / st_rpc_send batches), SEND_STATUS, wait for the
 *     close tag, access log line ──> request_call again (unless stopping)
 *
 * st_server_stop: shutdown_and_notify, wait the grace period, cancel all
 * calls, destroy the server, shut down and drain every queue, join. */
#include "rpc.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "cleanup.h"
#include "fs.h"
#include "log.h"
#include "pool.h"
#include "services.h"

#define MAX_METHODS 64
#define MAX_SERVICES 16
#define MAX_COUNTERS 64

struct worker {
  st_server *srv;
  grpc_completion_queue *cq;
  pthread_t thread;
  bool started, ran;
  char request_tag;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
};

struct service {
  const char *name;
  void *ud;
  void (*free_ud)(void *ud);
};

struct st_server {
  st_server_config cfg;
  grpc_server *server;
  grpc_completion_queue *shutdown_cq;
  struct worker *workers;
  unsigned n_workers;
  int port;
  st_store *store;
  st_tokens *tokens;
  struct {
    const st_rpc_method *m;
    void *ud;
  } methods[MAX_METHODS];
  size_t n_methods;
  struct service services[MAX_SERVICES];
  size_t n_services;
  pthread_mutex_t counter_lock;
  const char *counter_names[MAX_COUNTERS];
  uint64_t counter_values[MAX_COUNTERS];
  size_t n_counters;
  atomic_bool stopping;
  atomic_bool shutdown_done; /* no call is left: workers may shut their queues */
  bool started, stopped;
  double started_at;
};

struct st_rpc_call {
  st_server *srv;
  struct worker *w;
  grpc_call *call;
  char *peer; /* gpr_malloc'd */
  const char *identity;
  char op_tag, close_tag;
  bool close_done;
  int close_canceled;
  bool sent_initial;
  bool stream_ended;
  bool failed; /* an op failed: the call is gone */
  uint64_t bytes_in, bytes_out;
};

/* ------------------------------------------------------------ roles, counters */

static const char *const role_names[] = {"none", "pull", "push", "build", "admin"};

int st_role_parse(const char *text, st_role *out, st_error *err) {
  for (int r = ST_ROLE_PULL; r <= ST_ROLE_ADMIN; r++)
    if (!strcmp(text, role_names[r])) {
      *out = (st_role)r;
      return ST_OK;
    }
  return st_error_set(err, ST_EINVAL, "unknown role '%s' (pull, push, build or admin)", text);
}

const char *st_role_name(st_role r) {
  return (unsigned)r < ST_ARRAY_SIZE(role_names) ? role_names[r] : "?";
}

static void counter_update(st_server *srv, const char *name, uint64_t v, bool set) {
  pthread_mutex_lock(&srv->counter_lock);
  size_t i = 0;
  while (i < srv->n_counters && strcmp(srv->counter_names[i], name))
    i++;
  if (i == srv->n_counters && i < MAX_COUNTERS)
    srv->counter_names[srv->n_counters++] = name;
  if (i < MAX_COUNTERS)
    srv->counter_values[i] = set ? v : srv->counter_values[i] + v;
  pthread_mutex_unlock(&srv->counter_lock);
}

void st_server_count(st_server *srv, const char *name, uint64_t delta) {
  counter_update(srv, name, delta, false);
}

void st_server_gauge(st_server *srv, const char *name, uint64_t value) {
  counter_update(srv, name, value, true);
}

void st_server_counters(st_server *srv, void (*fn)(const char *name, uint64_t v, void *ud),
                        void *ud) {
  pthread_mutex_lock(&srv->counter_lock);
  size_t n = srv->n_counters;
  const char *names[MAX_COUNTERS];
  uint64_t values[MAX_COUNTERS];
  memcpy(names, srv->counter_names, n * sizeof *names);
  memcpy(values, srv->counter_values, n * sizeof *values);
  pthread_mutex_unlock(&srv->counter_lock);
  for (size_t i = 0; i < n; i++)
    fn(names[i], values[i], ud);
}

st_store *st_server_store(st_server *srv) { return srv->store; }
const st_server_config *st_server_get_config(const st_server *srv) { return &srv->cfg; }
bool st_server_auth_required(const st_server *srv) { return srv->tokens != NULL; }
double st_server_uptime(const st_server *srv) { return st_now() - srv->started_at; }
int st_server_port(const st_server *srv) { return srv->port; }
st_server *st_rpc_server(st_rpc_call *c) { return c->srv; }
const char *st_rpc_peer(const st_rpc_call *c) { return c->peer ? c->peer : "?"; }
const char *st_rpc_identity(const st_rpc_call *c) { return c->identity; }
bool st_server_stopping(const st_server *srv) { return atomic_load(&srv->stopping); }

bool st_rpc_canceled(const st_rpc_call *c) { return c->failed || (c->close_done && c->close_canceled); }

int st_server_add_service(st_server *srv, const char *name, const st_rpc_method *methods,
                          size_t n, void *ud, void (*free_ud)(void *ud), st_error *err) {
  if (srv->n_services == MAX_SERVICES || srv->n_methods + n > MAX_METHODS) {
    if (free_ud)
      free_ud(ud);
    return st_error_set(err, ST_ELIMIT, "service %s: too many services or methods", name);
  }
  srv->services[srv->n_services++] = (struct service){name, ud, free_ud};
  for (size_t i = 0; i < n; i++) {
    srv->methods[srv->n_methods].m = &methods[i];
    srv->methods[srv->n_methods++].ud = ud;
  }
  return ST_OK;
}

/* ------------------------------------------------------------------- call ops */

/* Waits for tag on the worker's queue; the close tag may fire meanwhile. */
static bool wait_tag(st_rpc_call *c, void *tag) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(c->w->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      return false; /* cannot happen while a call is open */
    if (ev.tag == &c->close_tag) {
      c->close_done = true;
      if (tag == &c->close_tag)
        return true;
      continue;
    }
    if (ev.tag == tag)
      return ev.success != 0;
  }
}

bool st_rpc_wait(st_rpc_call *c, int timeout_ms) {
  gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                    gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
  while (!c->failed && !c->close_done) {
    grpc_event ev = grpc_completion_queue_next(c->w->cq, until, NULL);
    if (ev.type != GRPC_OP_COMPLETE)
      break; /* the time is up */
    if (ev.tag == &c->close_tag)
      c->close_done = true; /* the only tag that can come while no batch runs */
  }
  return st_rpc_canceled(c);
}

static bool run_batch(st_rpc_call *c, const grpc_op *ops, size_t n) {
  if (c->failed)
    return false;
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->op_tag, NULL);
  if (e != GRPC_CALL_OK || !wait_tag(c, &c->op_tag)) {
    c->failed = true;
    return false;
  }
  return true;
}

int st_rpc_recv(st_rpc_call *c, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                st_error *err) {
  if (c->stream_ended)
    return 0;
  grpc_byte_buffer *bb = NULL;
  grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
  op.data.recv_message.recv_message = &bb;
  if (!run_batch(c, &op, 1))
    return st_error_set(err, ST_ECANCELED, "client went away");
  if (!bb) {
    c->stream_ended = true;
    return 0;
  }
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, bb)) {
    grpc_byte_buffer_destroy(bb);
    return st_error_set(err, ST_EFORMAT, "unreadable request message");
  }
  grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  grpc_byte_buffer_destroy(bb);
  size_t len = GRPC_SLICE_LENGTH(s);
  c->bytes_in += len;
  *out = protobuf_c_message_unpack(desc, NULL, len, GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  if (!*out)
    return st_error_set(err, ST_EFORMAT, "malformed %s message (%zu bytes)", desc->name, len);
  return 1;
}

int st_rpc_send(st_rpc_call *c, const ProtobufCMessage *msg, st_error *err) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  grpc_slice s = grpc_slice_malloc(len);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA}, {.op = GRPC_OP_SEND_MESSAGE}};
  ops[1].data.send_message.send_message = bb;
  size_t first = c->sent_initial ? 1 : 0;
  bool ok = run_batch(c, ops + first, 2 - first);
  c->sent_initial = true;
  grpc_byte_buffer_destroy(bb);
  if (!ok)
    return st_error_set(err, ST_ECANCELED, "client went away");
  c->bytes_out += len;
  return ST_OK;
}

/* ---------------------------------------------------------------- serve_call */

static const char *find_md(const grpc_metadata_array *md, const char *key) {
  static _Thread_local char value[512];
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice *k = &md->metadata[i].key;
    if (GRPC_SLICE_LENGTH(*k) == strlen(key) &&
        !memcmp(GRPC_SLICE_START_PTR(*k), key, strlen(key))) {
      size_t len = GRPC_SLICE_LENGTH(md->metadata[i].value);
      if (len >= sizeof value)
        len = sizeof value - 1;
      memcpy(value, GRPC_SLICE_START_PTR(md->metadata[i].value), len);
      value[len] = '\0';
      return value;
    }
  }
  return NULL;
}

static int check_auth(st_rpc_call *c, const grpc_metadata_array *md, const st_rpc_method *m,
                      const char *method, st_error *err) {
  st_server *srv = c->srv;
  if (!srv->tokens)
    return ST_OK;
  const char *auth = find_md(md, "authorization");
  if (!auth)
    return st_error_set(err, ST_EAUTH, "missing bearer token (authorization metadata)");
  if (strncasecmp(auth, "Bearer ", 7))
    return st_error_set(err, ST_EAUTH, "authorization is not a bearer token");
  st_role role;
  const char *name;
  int r = st_tokens_check(srv->tokens, auth + 7, &role, &name, err);
  if (r < 0)
    return r;
  c->identity = name;
  if (role < m->role)
    return st_error_set(err, ST_EPERM, "token '%s' (role %s) may not call %s (needs role %s)",
                        name, st_role_name(role), method, st_role_name(m->role));
  return ST_OK;
}

static void serve_call(struct worker *w) {
  st_server *srv = w->srv;
  st_rpc_call c = {.srv = srv, .w = w, .call = w->call, .identity = "-"};
  double t0 = st_now();
  char method[160];
  size_t mlen = GRPC_SLICE_LENGTH(w->details.method);
  if (mlen >= sizeof method)
    mlen = sizeof method - 1;
  memcpy(method, GRPC_SLICE_START_PTR(w->details.method), mlen);
  method[mlen] = '\0';
  c.peer = grpc_call_get_peer(c.call);

  grpc_op close_op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
  close_op.data.recv_close_on_server.cancelled = &c.close_canceled;
  if (grpc_call_start_batch(c.call, &close_op, 1, &c.close_tag, NULL) != GRPC_CALL_OK)
    c.close_done = true;

  st_error err = {0};
  const st_rpc_method *m = NULL;
  void *ud = NULL;
  for (size_t i = 0; i < srv->n_methods; i++)
    if (!strcmp(srv->methods[i].m->path, method)) {
      m = srv->methods[i].m;
      ud = srv->methods[i].ud;
      break;
    }
  int rc;
  if (!m)
    rc = st_error_set(&err, ST_EUNSUPPORTED, "method %s is not implemented", method);
  else if ((rc = check_auth(&c, &w->md, m, method, &err)) == ST_OK)
    rc = m->fn(&c, ud, &err);

  int status = rc < 0 ? st_code_grpc_status(rc) : GRPC_STATUS_OK;
  if (rc < 0 && !err.msg[0])
    snprintf(err.msg, sizeof err.msg, "%s", st_code_message(rc));
  if (!c.failed) {
    grpc_slice details = grpc_slice_from_copied_string(rc < 0 ? err.msg : "");
    grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                      {.op = GRPC_OP_SEND_STATUS_FROM_SERVER}};
    ops[1].data.send_status_from_server.status = (grpc_status_code)status;
    ops[1].data.send_status_from_server.status_details = &details;
    size_t first = c.sent_initial ? 1 : 0;
    run_batch(&c, ops + first, 2 - first);
    grpc_slice_unref(details);
  }
  if (!c.close_done)
    wait_tag(&c, &c.close_tag);
  if (st_rpc_canceled(&c) && rc == ST_OK)
    status = GRPC_STATUS_CANCELLED;

  st_server_count(srv, "calls", 1);
  if (status != GRPC_STATUS_OK)
    st_server_count(srv, "calls_failed", 1);
  st_server_count(srv, "bytes_in", c.bytes_in);
  st_server_count(srv, "bytes_out", c.bytes_out);
  if (srv->cfg.access_log)
    fprintf(stderr, "access peer=%s who=%s method=%s status=%d in=%llu out=%llu ms=%.1f%s%s\n",
            st_rpc_peer(&c), c.identity, method, status, (unsigned long long)c.bytes_in,
            (unsigned long long)c.bytes_out, (st_now() - t0) * 1e3, rc < 0 ? " error=" : "",
            rc < 0 ? err.msg : "");
  gpr_free(c.peer);
  grpc_call_unref(c.call);
}

/* -------------------------------------------------------------------- workers */

static bool post_request(struct worker *w) {
  grpc_call_details_init(&w->details);
  grpc_metadata_array_init(&w->md);
  w->call = NULL;
  grpc_call_error e = grpc_server_request_call(w->srv->server, &w->call, &w->details, &w->md,
                                               w->cq, w->cq, &w->request_tag);
  if (e != GRPC_CALL_OK) {
    grpc_call_details_destroy(&w->details);
    grpc_metadata_array_destroy(&w->md);
    return false;
  }
  return true;
}

/* A worker shuts down its own queue, once the server has no call left and
 * the worker is outside serve_call: only it starts batches on that queue. */
static void *worker_main(void *arg) {
  struct worker *w = arg;
  st_server *srv = w->srv;
  bool posted = post_request(w), shut = false;
  for (;;) {
    gpr_timespec deadline =
        atomic_load(&srv->stopping)
            ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(50, GPR_TIMESPAN))
            : gpr_inf_future(GPR_CLOCK_REALTIME);
    grpc_event ev = grpc_completion_queue_next(w->cq, deadline, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      break;
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      if (!shut && atomic_load(&srv->shutdown_done)) {
        grpc_completion_queue_shutdown(w->cq);
        shut = true;
      }
      continue;
    }
    if (ev.tag != &w->request_tag || !posted)
      continue;
    posted = false;
    if (ev.success && w->call && !shut && !atomic_load(&srv->shutdown_done))
      serve_call(w);
    else if (w->call)
      grpc_call_unref(w->call);
    grpc_call_details_destroy(&w->details);
    grpc_metadata_array_destroy(&w->md);
    if (!atomic_load(&srv->stopping))
      posted = post_request(w);
  }
  return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

static int read_pem(const char *path, char **out, st_error *err) {
  uint8_t *data;
  size_t len;
  int r = st_read_file_at(AT_FDCWD, path, 1u << 20, &data, &len, err);
  if (r < 0)
    return st_error_prefix(err, "TLS file %s", path);
  *out = (char *)data;
  return ST_OK;
}

static grpc_server_credentials *make_creds(const st_server_config *cfg, st_error *err) {
  if (!cfg->tls_cert && !cfg->tls_key && !cfg->tls_client_ca)
    return grpc_insecure_server_credentials_create();
  if (!cfg->tls_cert || !cfg->tls_key) {
    st_error_set(err, ST_EINVAL, "TLS needs both --tls-cert and --tls-key");
    return NULL;
  }
  _cleanup_free_ char *cert = NULL, *key = NULL, *ca = NULL;
  if (read_pem(cfg->tls_cert, &cert, err) < 0 || read_pem(cfg->tls_key, &key, err) < 0 ||
      (cfg->tls_client_ca && read_pem(cfg->tls_client_ca, &ca, err) < 0))
    return NULL;
  grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
  grpc_server_credentials *creds = grpc_ssl_server_credentials_create_ex(
      ca, &pair, 1,
      ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
         : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
      NULL);
  if (!creds)
    st_error_set(err, ST_EINVAL, "TLS certificate %s or key %s not usable", cfg->tls_cert,
                 cfg->tls_key);
  return creds;
}

static int (*const service_registrars[])(st_server *srv, st_error *err) = {
    st_svc_capabilities_register, st_svc_cas_register, st_svc_images_register,
    st_svc_status_register, st_svc_builds_register,
};

int st_server_new(st_server **out, const st_server_config *cfg, st_error *err) {
  setenv("GRPC_POLL_STRATEGY", "poll", 0);
  st_server *srv = calloc(1, sizeof *srv);
  if (!srv)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  grpc_init();
  srv->cfg = *cfg;
  if (!srv->cfg.max_message)
    srv->cfg.max_message = 4u << 20;
  if (!srv->cfg.max_streams)
    srv->cfg.max_streams = 32;
  if (srv->cfg.grace_seconds < 0)
    srv->cfg.grace_seconds = 10;
  if (!srv->cfg.workers) {
    srv->cfg.workers = 2 * st_cpu_count();
    if (srv->cfg.workers < 8)
      srv->cfg.workers = 8;
  }
  pthread_mutex_init(&srv->counter_lock, NULL);
  srv->started_at = st_now();
  srv->stopped = true; /* nothing to stop until started */
  int r = st_store_open(&srv->store, cfg->store_path, ST_STORE_CREATE, err);
  if (r == ST_OK && cfg->tokens_path)
    r = st_tokens_load(&srv->tokens, cfg->tokens_path, err);
  for (size_t i = 0; r == ST_OK && i < ST_ARRAY_SIZE(service_registrars); i++)
    r = service_registrars[i](srv, err);
  if (r < 0) {
    st_server_free(srv);
    return r;
  }
  grpc_arg args[] = {
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = (int)srv->cfg.max_message}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = (int)srv->cfg.max_message}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_CONCURRENT_STREAMS, {.integer = (int)srv->cfg.max_streams}},
  };
  grpc_channel_args chargs = {ST_ARRAY_SIZE(args), args};
  srv->server = grpc_server_create(&chargs, NULL);
  srv->n_workers = srv->cfg.workers;
  srv->workers = calloc(srv->n_workers, sizeof *srv->workers);
  if (!srv->workers) {
    st_server_free(srv);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  for (unsigned i = 0; i < srv->n_workers; i++) {
    srv->workers[i].srv = srv;
    srv->workers[i].cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->server, srv->workers[i].cq, NULL);
  }
  srv->shutdown_cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_server_credentials *creds = make_creds(cfg, err);
  if (!creds) {
    st_server_free(srv);
    return err->code;
  }
  srv->port = grpc_server_add_http2_port(srv->server, cfg->listen, creds);
  grpc_server_credentials_release(creds);
  if (srv->port == 0) {
    st_server_free(srv);
    return st_error_set(err, ST_EIO, "cannot listen on %s (address in use or invalid)",
                        cfg->listen);
  }
  *out = srv;
  return ST_OK;
}

int st_server_start(st_server *srv, st_error *err) {
  grpc_server_start(srv->server);
  srv->started = true;
  srv->stopped = false;
  for (unsigned i = 0; i < srv->n_workers; i++) {
    if (pthread_create(&srv->workers[i].thread, NULL, worker_main, &srv->workers[i])) {
      st_server_stop(srv);
      return st_error_set(err, ST_EIO, "cannot start worker threads");
    }
    srv->workers[i].started = srv->workers[i].ran = true;
  }
  return ST_OK;
}

void st_server_stop(st_server *srv) {
  if (!srv || srv->stopped)
    return;
  srv->stopped = true;
  atomic_store(&srv->stopping, true);
  char tag;
  grpc_server_shutdown_and_notify(srv->server, srv->shutdown_cq, &tag);
  gpr_timespec grace = gpr_time_add(
      gpr_now(GPR_CLOCK_MONOTONIC),
      gpr_time_from_millis((int64_t)(srv->cfg.grace_seconds * 1e3), GPR_TIMESPAN));
  grpc_event ev = grpc_completion_queue_pluck(srv->shutdown_cq, &tag, grace, NULL);
  if (ev.type == GRPC_QUEUE_TIMEOUT) {
    st_warn("shutdown: grace period over, canceling the calls still running");
    grpc_server_cancel_all_calls(srv->server);
    grpc_completion_queue_pluck(srv->shutdown_cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                NULL);
  }
  atomic_store(&srv->shutdown_done, true);
  for (unsigned i = 0; i < srv->n_workers; i++)
    if (srv->workers[i].started) {
      pthread_join(srv->workers[i].thread, NULL);
      srv->workers[i].started = false;
    }
  st_error err = {0};
  if (srv->store && st_store_flush(srv->store, &err) < 0)
    st_error_log("shutdown: %s", err.msg);
}

void st_server_free(st_server *srv) {
  if (!srv)
    return;
  if (srv->started)
    st_server_stop(srv);
  else if (srv->server) {
    /* never started: no call can exist */
    grpc_server_shutdown_and_notify(srv->server, srv->shutdown_cq, &srv->n_workers);
    grpc_completion_queue_pluck(srv->shutdown_cq, &srv->n_workers,
                                gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  }
  if (srv->server)
    grpc_server_destroy(srv->server);
  for (unsigned i = 0; srv->workers && i < srv->n_workers; i++) {
    if (!srv->started || !srv->workers[i].ran)
      grpc_completion_queue_shutdown(srv->workers[i].cq);
    while (grpc_completion_queue_next(srv->workers[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                      NULL).type != GRPC_QUEUE_SHUTDOWN)
      ;
    grpc_completion_queue_destroy(srv->workers[i].cq);
  }
  if (srv->shutdown_cq) {
    grpc_completion_queue_shutdown(srv->shutdown_cq);
    while (grpc_completion_queue_pluck(srv->shutdown_cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME),
                                       NULL).type != GRPC_QUEUE_SHUTDOWN)
      ;
    grpc_completion_queue_destroy(srv->shutdown_cq);
  }
  for (size_t i = 0; i < srv->n_services; i++)
    if (srv->services[i].free_ud)
      srv->services[i].free_ud(srv->services[i].ud);
  free(srv->workers);
  st_tokens_free(srv->tokens);
  st_store_free(srv->store);
  pthread_mutex_destroy(&srv->counter_lock);
  free(srv);
  grpc_shutdown();
}
