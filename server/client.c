/* SPDX-License-Identifier: Apache-2.0 */
/* The client channel and call plumbing (client.h, client-private.h); the
 * transfers are in client-transfer.c. */
#include "client-private.h"

#include <fcntl.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "strata.pb-c.h"

#define CLIENT_MAX_MESSAGE (16 << 20)

int st_client_code_from_status(int status) {
  switch (status) {
  case GRPC_STATUS_OK: return ST_OK;
  case GRPC_STATUS_CANCELLED: return ST_ECANCELED;
  case GRPC_STATUS_INVALID_ARGUMENT: return ST_EINVAL;
  case GRPC_STATUS_DEADLINE_EXCEEDED: return ST_ETIMEOUT;
  case GRPC_STATUS_NOT_FOUND: return ST_ENOENT;
  case GRPC_STATUS_ALREADY_EXISTS: return ST_EEXIST;
  case GRPC_STATUS_PERMISSION_DENIED: return ST_EPERM;
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return ST_ELIMIT;
  case GRPC_STATUS_FAILED_PRECONDITION: return ST_EVERSION;
  case GRPC_STATUS_UNIMPLEMENTED: return ST_EUNSUPPORTED;
  case GRPC_STATUS_UNAVAILABLE: return ST_EUNAVAIL;
  case GRPC_STATUS_DATA_LOSS: return ST_ECORRUPT;
  case GRPC_STATUS_UNAUTHENTICATED: return ST_EAUTH;
  case GRPC_STATUS_ABORTED: return ST_EBUSY;
  default: return ST_EIO;
  }
}

static int read_pem(const char *path, char **out, st_error *err) {
  uint8_t *data;
  size_t len;
  if (st_read_file_at(AT_FDCWD, path, 1u << 20, &data, &len, err) < 0)
    return st_error_prefix(err, "TLS file %s", path);
  *out = (char *)data;
  return ST_OK;
}

void st_client_free(st_client *c) {
  if (!c)
    return;
  if (c->channel)
    grpc_channel_destroy(c->channel);
  free(c->target);
  free(c->auth);
  free(c);
  grpc_shutdown();
}

static grpc_channel_credentials *make_creds(const st_client_config *cfg, st_error *err) {
  if (!cfg->tls_ca) {
    if (cfg->tls_cert || cfg->tls_key) {
      st_error_set(err, ST_EINVAL, "a client certificate needs TLS (--tls-ca)");
      return NULL;
    }
    return grpc_insecure_credentials_create();
  }
  _cleanup_free_ char *ca = NULL, *cert = NULL, *key = NULL;
  if (read_pem(cfg->tls_ca, &ca, err) < 0)
    return NULL;
  if ((cfg->tls_cert != NULL) != (cfg->tls_key != NULL)) {
    st_error_set(err, ST_EINVAL, "a client certificate needs both --tls-cert and --tls-key");
    return NULL;
  }
  if (cfg->tls_cert && (read_pem(cfg->tls_cert, &cert, err) < 0 || read_pem(cfg->tls_key, &key, err) < 0))
    return NULL;
  grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
  grpc_channel_credentials *creds = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
  if (!creds)
    st_error_set(err, ST_EINVAL, "TLS CA %s not usable", cfg->tls_ca);
  return creds;
}

int st_client_open(st_client **out, const st_client_config *cfg, st_error *err) {
  setenv("GRPC_POLL_STRATEGY", "poll", 0);
  if (!cfg->target || !*cfg->target)
    return st_error_set(err, ST_EINVAL, "no server address");
  grpc_init();
  st_client *c = calloc(1, sizeof *c);
  if (!c) {
    grpc_shutdown();
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  c->deadline = cfg->deadline_seconds > 0 ? cfg->deadline_seconds : 600;
  c->target = strdup(cfg->target);
  if (cfg->token && asprintf(&c->auth, "Bearer %s", cfg->token) < 0)
    c->auth = NULL;
  if (!c->target || (cfg->token && !c->auth)) {
    st_client_free(c);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  grpc_channel_credentials *creds = make_creds(cfg, err);
  if (!creds) {
    st_client_free(c);
    return err->code;
  }
  /* A busy server may take a while to answer a new connection's handshake:
   * give each connection attempt up to a minute (gRPC's default is 20 s). */
  grpc_arg args[4] = {
      {GRPC_ARG_INTEGER, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, {.integer = 60000}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = CLIENT_MAX_MESSAGE}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = CLIENT_MAX_MESSAGE}},
      {GRPC_ARG_STRING, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, {.string = (char *)cfg->tls_server_name}},
  };
  grpc_channel_args chargs = {cfg->tls_server_name ? 4 : 3, args};
  c->channel = grpc_channel_create(cfg->target, creds, &chargs);
  grpc_channel_credentials_release(creds);
  if (!c->channel) {
    st_client_free(c);
    return st_error_set(err, ST_EINVAL, "bad server address '%s'", cfg->target);
  }
  *out = c;
  return ST_OK;
}

/* ---------------------------------------------------------------- calls */

static bool run(cl_call *call, const grpc_op *ops, size_t n) {
  if (call->broken)
    return false;
  if (grpc_call_start_batch(call->call, ops, n, &call->op_tag, NULL) != GRPC_CALL_OK) {
    call->broken = true;
    return false;
  }
  grpc_event ev = grpc_completion_queue_pluck(call->cq, &call->op_tag,
                                              gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  if (!ev.success)
    call->broken = true;
  return ev.success != 0;
}

int cl_call_start(cl_call *call, st_client *c, const char *method, st_error *err) {
  memset(call, 0, sizeof *call);
  call->client = c;
  call->method = method;
  call->cq = grpc_completion_queue_create_for_pluck(NULL);
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                   gpr_time_from_millis((int64_t)(c->deadline * 1e3), GPR_TIMESPAN));
  grpc_slice m = grpc_slice_from_static_string(method);
  call->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, call->cq, m,
                                        NULL, deadline, NULL);
  grpc_metadata_array_init(&call->initial_md);
  grpc_metadata_array_init(&call->trailing_md);
  grpc_op st = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
  st.data.recv_status_on_client.trailing_metadata = &call->trailing_md;
  st.data.recv_status_on_client.status = &call->status;
  st.data.recv_status_on_client.status_details = &call->details;
  if (grpc_call_start_batch(call->call, &st, 1, &call->status_tag, NULL) != GRPC_CALL_OK)
    return st_error_set(err, ST_EIO, "cannot start a call to %s", c->target);
  grpc_metadata md = {.key = grpc_slice_from_static_string("authorization")};
  grpc_op op = {.op = GRPC_OP_SEND_INITIAL_METADATA};
  if (c->auth) {
    md.value = grpc_slice_from_static_string(c->auth);
    op.data.send_initial_metadata.count = 1;
    op.data.send_initial_metadata.metadata = &md;
  }
  run(call, &op, 1);
  return ST_OK;
}

int cl_call_send(cl_call *call, const ProtobufCMessage *msg, st_error *err) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  grpc_slice s = grpc_slice_malloc(len);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
  op.data.send_message.send_message = bb;
  bool ok = run(call, &op, 1);
  grpc_byte_buffer_destroy(bb);
  if (!ok)
    return st_error_set(err, ST_EIO, "call %s broke off", call->method);
  call->bytes_out += len;
  return ST_OK;
}

int cl_call_close_send(cl_call *call, st_error *err) {
  grpc_op op = {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT};
  return run(call, &op, 1) ? ST_OK : st_error_set(err, ST_EIO, "call %s broke off", call->method);
}

int cl_call_recv(cl_call *call, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                 st_error *err) {
  grpc_byte_buffer *bb = NULL;
  grpc_op ops[2] = {{.op = GRPC_OP_RECV_INITIAL_METADATA}, {.op = GRPC_OP_RECV_MESSAGE}};
  ops[0].data.recv_initial_metadata.recv_initial_metadata = &call->initial_md;
  ops[1].data.recv_message.recv_message = &bb;
  size_t first = call->got_initial ? 1 : 0;
  call->got_initial = true;
  if (!run(call, ops + first, 2 - first))
    return st_error_set(err, ST_EIO, "call %s broke off", call->method);
  if (!bb)
    return 0;
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, bb)) {
    grpc_byte_buffer_destroy(bb);
    return st_error_set(err, ST_EFORMAT, "unreadable response to %s", call->method);
  }
  grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  grpc_byte_buffer_destroy(bb);
  call->bytes_in += GRPC_SLICE_LENGTH(s);
  *out = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  if (!*out)
    return st_error_set(err, ST_EFORMAT, "malformed response to %s from %s", call->method,
                        call->client->target);
  return 1;
}

static int status_error(cl_call *call, st_error *err) {
  const char *target = call->client->target;
  char details[512];
  size_t n = GRPC_SLICE_LENGTH(call->details);
  if (n >= sizeof details)
    n = sizeof details - 1;
  memcpy(details, GRPC_SLICE_START_PTR(call->details), n);
  details[n] = '\0';
  int code = st_client_code_from_status(call->status);
  switch (call->status) {
  case GRPC_STATUS_UNAVAILABLE:
    return st_error_set(err, code,
                        "server %s unavailable: %s (is it running, and do both sides agree on "
                        "TLS?)",
                        target, details);
  case GRPC_STATUS_DEADLINE_EXCEEDED:
    return st_error_set(err, code, "server %s: deadline of %.0f s exceeded in %s", target,
                        call->client->deadline, call->method);
  case GRPC_STATUS_UNAUTHENTICATED:
    return st_error_set(err, code, "server %s: authentication failed: %s", target, details);
  case GRPC_STATUS_PERMISSION_DENIED:
    return st_error_set(err, code, "server %s: permission denied: %s", target, details);
  default:
    return st_error_set(err, code, "server %s: %s", target, details);
  }
}

int cl_call_finish(cl_call *call, int rc, st_error *err) {
  /* Our own abort cancels the call. A broken call has its status on the
   * way (canceling would replace it by CANCELLED), but the status may wait
   * for the initial metadata to be asked for: ask, wait (generously: on a
   * loaded machine the status took more than 3 s to arrive), and only then
   * cancel. */
  gpr_timespec inf = gpr_inf_future(GPR_CLOCK_REALTIME);
  if (rc < 0 && !call->broken) {
    grpc_call_cancel(call->call, NULL);
    grpc_completion_queue_pluck(call->cq, &call->status_tag, inf, NULL);
  } else if (call->broken) {
    bool asked = false;
    if (!call->got_initial) {
      grpc_op op = {.op = GRPC_OP_RECV_INITIAL_METADATA};
      op.data.recv_initial_metadata.recv_initial_metadata = &call->initial_md;
      asked = grpc_call_start_batch(call->call, &op, 1, &call->op_tag, NULL) == GRPC_CALL_OK;
    }
    gpr_timespec soon = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                     gpr_time_from_millis(30000, GPR_TIMESPAN));
    if (grpc_completion_queue_pluck(call->cq, &call->status_tag, soon, NULL).type ==
        GRPC_QUEUE_TIMEOUT) {
      grpc_call_cancel(call->call, NULL);
      grpc_completion_queue_pluck(call->cq, &call->status_tag, inf, NULL);
    }
    if (asked)
      grpc_completion_queue_pluck(call->cq, &call->op_tag, inf, NULL);
  } else
    grpc_completion_queue_pluck(call->cq, &call->status_tag, inf, NULL);
  /* A status the server sent explains a broken call better than we can. */
  if (call->status != GRPC_STATUS_OK && (rc >= 0 || call->broken || rc == ST_EIO))
    rc = status_error(call, err);
  else if (rc >= 0 && call->broken)
    rc = st_error_set(err, ST_EIO, "call %s to %s broke off", call->method, call->client->target);
  grpc_metadata_array_destroy(&call->initial_md);
  grpc_metadata_array_destroy(&call->trailing_md);
  grpc_slice_unref(call->details);
  grpc_call_unref(call->call);
  grpc_completion_queue_shutdown(call->cq);
  while (grpc_completion_queue_pluck(call->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(call->cq);
  return rc;
}

int cl_unary(st_client *c, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, st_error *err) {
  cl_call call;
  int r = cl_call_start(&call, c, method, err);
  if (r == ST_OK)
    r = cl_call_send(&call, req, err);
  if (r == ST_OK)
    r = cl_call_close_send(&call, err);
  if (r == ST_OK) {
    r = cl_call_recv(&call, resp_desc, resp, err);
    if (r == 0)
      r = st_error_set(err, ST_EIO, "no response to %s", method);
  }
  r = cl_call_finish(&call, r < 0 ? r : ST_OK, err);
  if (r < 0 && *resp) {
    protobuf_c_message_free_unpacked(*resp, NULL);
    *resp = NULL;
  }
  return r;
}

int st_client_capabilities(st_client *c, st_client_caps *out, st_error *err) {
  Strata__V1__GetCapabilitiesRequest req = STRATA__V1__GET_CAPABILITIES_REQUEST__INIT;
  Strata__V1__GetCapabilitiesResponse *resp = NULL;
  int r = cl_unary(c, "/strata.v1.Capabilities/GetCapabilities", &req.base,
                   &strata__v1__get_capabilities_response__descriptor, (ProtobufCMessage **)&resp,
                   err);
  if (r < 0)
    return r;
  memset(out, 0, sizeof *out);
  snprintf(out->version, sizeof out->version, "%s", resp->server_version);
  out->chunk_min = resp->chunk_min;
  out->chunk_avg = resp->chunk_avg;
  out->chunk_max = resp->chunk_max;
  out->max_message_bytes = resp->max_message_bytes;
  out->max_batch_bytes = resp->max_batch_bytes;
  out->max_batch_digests = resp->max_batch_digests;
  out->auth_required = resp->auth_required;
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  return ST_OK;
}

int st_client_resolve(st_client *c, const char *ref, st_digest *out, st_error *err) {
  Strata__V1__ResolveRequest req = STRATA__V1__RESOLVE_REQUEST__INIT;
  req.ref = (char *)ref;
  Strata__V1__ResolveResponse *resp = NULL;
  int r = cl_unary(c, "/strata.v1.Images/Resolve", &req.base,
                   &strata__v1__resolve_response__descriptor, (ProtobufCMessage **)&resp, err);
  if (r < 0)
    return r;
  if (resp->digest.len != ST_DIGEST_LEN)
    r = st_error_set(err, ST_EFORMAT, "server %s: bad digest for %s", c->target, ref);
  else
    memcpy(out->bytes, resp->digest.data, ST_DIGEST_LEN);
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  return r;
}

int st_client_tag(st_client *c, const char *name, const char *tag, const st_digest *image,
                  st_error *err) {
  Strata__V1__TagRequest req = STRATA__V1__TAG_REQUEST__INIT;
  req.name = (char *)name;
  req.tag = (char *)tag;
  req.digest.data = (uint8_t *)image->bytes;
  req.digest.len = ST_DIGEST_LEN;
  ProtobufCMessage *resp = NULL;
  int r = cl_unary(c, "/strata.v1.Images/Tag", &req.base, &strata__v1__tag_response__descriptor,
                   &resp, err);
  if (resp)
    protobuf_c_message_free_unpacked(resp, NULL);
  return r;
}
