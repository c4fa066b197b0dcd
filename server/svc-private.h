/* SPDX-License-Identifier: Apache-2.0 */
/* Private to server/svc-*.c: limits and helpers the services share. */
#pragma once

#include "backend.h"
#include "digest.h"
#include "rpc.h"
#include "services.h"
#include "strata.pb-c.h"

/* Payload bytes per streamed message, digests per request. */
#define SVC_BATCH_BYTES (1u << 20)
#define SVC_BATCH_DIGESTS 16384u

/* A 32-byte digest field; ST_EINVAL naming what (e.g. "digest #3") otherwise. */
int svc_digest(st_digest *out, const ProtobufCBinaryData *b, const char *what, st_error *err);
/* The ObjectKind of the API as a store kind; ST_EINVAL for an unknown one. */
int svc_kind(st_kind *out, int kind, st_error *err);
/* Sends the stored frame of (k, d) as BlobPieces, each wrapped in a
 * GetImageResponse when as_image. ST_ENOENT "<kind> sha256:... not found". */
int svc_send_blob(st_rpc_call *c, st_kind k, const st_digest *d, bool as_image, st_error *err);
