/* SPDX-License-Identifier: Apache-2.0 */
/* Capabilities.GetCapabilities: what a client needs to know before talking
 * to this server (version, chunking, limits, whether tokens are required). */
#include "svc-private.h"

#include "cleanup.h"

#include "strata-config.h"

static int get_capabilities(st_rpc_call *c, void *ud, st_error *err) {
  ProtobufCMessage *req;
  int r = st_rpc_recv(c, &strata__v1__get_capabilities_request__descriptor, &req, err);
  if (r <= 0)
    return r < 0 ? r : st_error_set(err, ST_EINVAL, "missing request");
  protobuf_c_message_free_unpacked(req, NULL);
  st_server *srv = st_rpc_server(c);
  const st_store_config *cfg = st_store_get_config(st_server_store(srv));
  char *compressors[] = {"zstd"};
  Strata__V1__GetCapabilitiesResponse resp = STRATA__V1__GET_CAPABILITIES_RESPONSE__INIT;
  resp.server_version = STRATA_VERSION;
  resp.chunk_min = cfg->chunking.min;
  resp.chunk_avg = cfg->chunking.avg;
  resp.chunk_max = cfg->chunking.max;
  resp.n_compressors = 1;
  resp.compressors = compressors;
  resp.zstd_level = cfg->zstd_level;
  resp.max_message_bytes = st_server_get_config(srv)->max_message;
  resp.max_batch_bytes = SVC_BATCH_BYTES;
  resp.max_batch_digests = SVC_BATCH_DIGESTS;
  resp.auth_required = st_server_auth_required(srv);
  resp.max_blob_bytes = ST_STORE_BLOB_MAX;
  return st_rpc_send(c, &resp.base, err);
}

static const st_rpc_method methods[] = {
    {"/strata.v1.Capabilities/GetCapabilities", ST_ROLE_PULL, get_capabilities},
};

int st_svc_capabilities_register(st_server *srv, st_error *err) {
  return st_server_add_service(srv, "Capabilities", methods, ST_ARRAY_SIZE(methods), NULL, NULL,
                               err);
}
