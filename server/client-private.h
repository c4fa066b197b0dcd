/* SPDX-License-Identifier: Apache-2.0 */
/* Private to server/client*.c: one call (unary or streaming) on the client's
 * channel, with its own pluck completion queue. */
#pragma once

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "client.h"
#include "strata.pb-c.h"

struct st_client {
  grpc_channel *channel;
  char *target;
  char *auth; /* "Bearer <token>" or NULL */
  double deadline;
};

typedef struct {
  st_client *client;
  const char *method;
  grpc_call *call;
  grpc_completion_queue *cq;
  grpc_metadata_array initial_md, trailing_md;
  grpc_status_code status;
  grpc_slice details;
  bool got_initial;
  bool broken;
  char status_tag, op_tag;
  uint64_t bytes_in, bytes_out;
} cl_call;

/* Starts a call (sends the metadata). ST_ENOMEM only. */
int cl_call_start(cl_call *call, st_client *c, const char *method, st_error *err);
/* Sends a message; on a broken call returns ST_EIO (see cl_call_finish). */
int cl_call_send(cl_call *call, const ProtobufCMessage *msg, st_error *err);
int cl_call_close_send(cl_call *call, st_error *err);
/* 1 with a message (free with protobuf_c_message_free_unpacked), 0 at the
 * end of the stream, <0 on a broken call or a malformed message. */
int cl_call_recv(cl_call *call, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                 st_error *err);
/* Waits for the status and frees the call. Returns the call's result: the
 * status mapped to an ST_E* code with a message naming the server, else rc
 * (the caller's own result so far) when the status is OK. */
int cl_call_finish(cl_call *call, int rc, st_error *err);
/* A unary call. */
int cl_unary(st_client *c, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, st_error *err);
