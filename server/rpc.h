/* SPDX-License-Identifier: Apache-2.0 */
/* The gRPC server framework of `strata serve`: listening (plain or TLS),
 * worker threads each with their own completion queue, bearer-token auth,
 * limits, an access log line per call, counters, and graceful shutdown.
 *
 * Adding a service is one file (server/svc-NAME.c) and one line:
 *   1. write handlers `int h(st_rpc_call *c, void *ud, st_error *err)`: read
 *      requests with st_rpc_recv (a unary call reads exactly one), answer
 *      with st_rpc_send, return ST_OK or an ST_E* code (the call ends with
 *      st_code_grpc_status(code) and err->msg as its details);
 *   2. list them in a static st_rpc_method table with the gRPC path
 *      ("/strata.v1.Builds/Submit") and the role each needs;
 *   3. give the file a `int st_svc_NAME_register(st_server *srv, st_error *err)`
 *      that calls st_server_add_service (state + a free function for it),
 *      declare it in server/services.h and add it to the services table
 *      in server/server.c.
 * Methods nobody registered answer UNIMPLEMENTED. Handlers run on a worker
 * thread, one call per worker at a time, so they may block; shared state
 * needs its own locking. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "error.h"
#include "store.h"

/* Roles, each including the ones below it: pull reads (Capabilities,
 * Cas.FindMissing/Read/GetBlob, Images.Resolve/Get/List/Missing, Status,
 * Builds.Get/List/Watch); push also writes chunks, blobs and tags; build also
 * submits and cancels builds; admin may do everything. */
typedef enum {
  ST_ROLE_NONE = 0,
  ST_ROLE_PULL = 1,
  ST_ROLE_PUSH = 2,
  ST_ROLE_BUILD = 3,
  ST_ROLE_ADMIN = 4,
} st_role;

/* "pull" ... "admin"; ST_EINVAL naming the text otherwise. */
int st_role_parse(const char *text, st_role *out, st_error *err);
const char *st_role_name(st_role r);

typedef struct st_server st_server;
typedef struct st_rpc_call st_rpc_call;

typedef int (*st_rpc_handler)(st_rpc_call *c, void *ud, st_error *err);

typedef struct {
  const char *path; /* "/strata.v1.Service/Method" (static) */
  st_role role;     /* least role the caller needs (when tokens are in use) */
  st_rpc_handler fn;
} st_rpc_method;

typedef struct {
  const char *listen;        /* "127.0.0.1:7070" */
  const char *store_path;    /* the store served (created if missing) */
  const char *tls_cert;      /* PEM files (nullable: plain text) */
  const char *tls_key;
  const char *tls_client_ca; /* nullable: with it, clients must present a cert it signed */
  const char *tokens_path;   /* nullable: no auth; see auth.h for the format */
  unsigned workers;          /* worker threads (0: 2 x CPUs, at least 8) */
  unsigned max_message;      /* bytes; 0: 4 MiB */
  unsigned max_streams;      /* concurrent calls per client connection; 0: 32 */
  double grace_seconds;      /* shutdown grace period; < 0: 10 s */
  bool access_log;           /* one stderr line per call */
  unsigned builds;           /* builds run at the same time (0: 1) */
} st_server_config;

/* Opens the store, reads the tokens, binds the port and registers every
 * service; nothing runs until st_server_start. ST_EIO naming the address if
 * the bind fails, or the store/tokens/TLS file error. *out only on success. */
int st_server_new(st_server **out, const st_server_config *cfg, st_error *err);
/* Starts the workers. */
int st_server_start(st_server *srv, st_error *err);
/* The port actually bound (useful with port 0). */
int st_server_port(const st_server *srv);
/* Stops accepting calls, lets in-flight calls finish for the grace period,
 * cancels the rest, joins the workers and flushes the store. Idempotent. */
void st_server_stop(st_server *srv);
/* Stops if needed and frees. NULL is a no-op. */
void st_server_free(st_server *srv);

/* ---- for services ---- */

/* Registers methods (the table must outlive the server). ud is passed to
 * every handler; free_ud (nullable) is called on it by st_server_free after
 * the workers have stopped. On failure free_ud(ud) has been called. */
int st_server_add_service(st_server *srv, const char *name, const st_rpc_method *methods,
                          size_t n, void *ud, void (*free_ud)(void *ud), st_error *err);
st_store *st_server_store(st_server *srv);
const st_server_config *st_server_get_config(const st_server *srv);
bool st_server_auth_required(const st_server *srv);
/* Adds delta to the named counter (created on first use; name static). */
void st_server_count(st_server *srv, const char *name, uint64_t delta);
/* Sets the named gauge (e.g. "builds_queued") to value. */
void st_server_gauge(st_server *srv, const char *name, uint64_t value);
/* Calls fn for every counter, in creation order. */
void st_server_counters(st_server *srv, void (*fn)(const char *name, uint64_t v, void *ud),
                        void *ud);
double st_server_uptime(const st_server *srv);
/* True once st_server_stop has begun: long-running handlers (streams that wait
 * for events) should end their call. */
bool st_server_stopping(const st_server *srv);

/* Receives the next request message into *out (free with
 * protobuf_c_message_free_unpacked). Returns 1 with a message, 0 at the end
 * of the client's stream, ST_ECANCELED when the client went away or the
 * deadline passed, ST_EFORMAT (→ INVALID_ARGUMENT) for undecodable bytes. */
int st_rpc_recv(st_rpc_call *c, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                st_error *err);
/* Sends one response message. ST_ECANCELED when the client went away. */
int st_rpc_send(st_rpc_call *c, const ProtobufCMessage *msg, st_error *err);
st_server *st_rpc_server(st_rpc_call *c);
/* "ipv4:127.0.0.1:40112" */
const char *st_rpc_peer(const st_rpc_call *c);
/* The token name of the caller, or "-" without auth. */
const char *st_rpc_identity(const st_rpc_call *c);
bool st_rpc_canceled(const st_rpc_call *c);
/* Waits up to timeout_ms while gRPC makes progress on this worker's queue: a
 * handler that waits for something other than its call (e.g. build events)
 * calls this instead of sleeping, so that connections this worker polls stay
 * served and a client that went away is noticed. True once the call is
 * cancelled or the client gone. */
bool st_rpc_wait(st_rpc_call *c, int timeout_ms);
