/* SPDX-License-Identifier: Apache-2.0 */
/* The strata gRPC client (library strata_client, meson `client_dep`): open a
 * channel to `strata serve`, resolve tags, pull an image into a local store
 * and push one from it, fetching or sending only the chunks the other side
 * lacks, over parallel streams. Thread-safe: one st_client may be used by
 * several threads at once. Every function returns ST_OK or a negative ST_E*
 * code with a one-line message in err naming the server, e.g.
 *   ST_EUNAVAIL  server unreachable, or TLS on one side only / TLS handshake failed
 *   ST_EAUTH     token missing or unknown (UNAUTHENTICATED)
 *   ST_EPERM     the token's role may not do this (PERMISSION_DENIED)
 *   ST_ETIMEOUT  the per-call deadline passed
 *   ST_ENOENT    image, tag or object not found on the server
 *   ST_EINVAL / ST_ECORRUPT / ST_ELIMIT  bad input, data failing verification, size limits
 * gRPC status codes map to these as st_client_code_from_status() says. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cleanup.h"
#include "digest.h"
#include "error.h"
#include "queue.h"
#include "store.h"

typedef struct st_client st_client;

typedef struct {
  const char *target;          /* "127.0.0.1:7070" (required) */
  const char *token;           /* bearer token (nullable: none) */
  const char *tls_ca;          /* PEM file of the CA to trust; non-NULL enables TLS */
  const char *tls_cert;        /* client certificate and key for mTLS (nullable) */
  const char *tls_key;
  const char *tls_server_name; /* nullable: check the server certificate for this name */
  double deadline_seconds;     /* per call (a whole stream is one call); 0: 600 */
} st_client_config;

/* Creates the channel (no I/O yet: an unreachable server shows on the first
 * call). Strings are copied. ST_EINVAL / ST_EIO for unreadable TLS files.
 * *out written only on success; free with st_client_free. */
int st_client_open(st_client **out, const st_client_config *cfg, st_error *err);
/* NULL is a no-op. */
void st_client_free(st_client *c);
ST_DEFINE_FREEP(st_client, st_client_free)

typedef struct {
  char version[64];
  uint32_t chunk_min, chunk_avg, chunk_max;
  uint32_t max_message_bytes, max_batch_bytes, max_batch_digests;
  bool auth_required;
} st_client_caps;

/* Capabilities.GetCapabilities; a cheap way to check connectivity and auth. */
int st_client_capabilities(st_client *c, st_client_caps *out, st_error *err);

/* Images.Resolve: "name:tag" or "sha256:<hex>" to the image digest.
 * ST_ENOENT when the server has no such image. */
int st_client_resolve(st_client *c, const char *ref, st_digest *out, st_error *err);

/* Images.Tag on the server (role push). */
int st_client_tag(st_client *c, const char *name, const char *tag, const st_digest *image,
                  st_error *err);

typedef struct {
  uint64_t chunks_total;   /* distinct chunks the image references */
  uint64_t chunks_moved;   /* chunks transferred (fetched or sent) */
  uint64_t chunks_present; /* chunks the receiving side already had */
  uint64_t bytes_moved;    /* compressed frame bytes transferred (chunks + blobs) */
  uint64_t chunk_bytes_moved;   /* uncompressed bytes of the moved chunks */
  uint64_t chunk_bytes_present; /* uncompressed bytes of the chunks already there */
  uint64_t layers_total, layers_moved;
  double seconds;
} st_transfer_stats;

/* How a pull or push moves chunks (all fields optional; NULL opts = defaults). */
typedef struct {
  unsigned streams;  /* parallel Cas.Read / Cas.Write streams, 0: 4 */
  uint64_t max_rate; /* compressed chunk bytes per second over all streams, 0: unlimited */
  /* Called from the stream threads (so it must be thread-safe) after each
   * batch of chunks: done and total are uncompressed bytes of the chunks
   * that move. */
  void (*progress)(uint64_t done, uint64_t total, void *ud);
  void *progress_ud;
} st_transfer_opts;

/* Pulls image `ref` ("name:tag" or "sha256:<hex>") from the server into
 * store: the manifest, the layer indexes store lacks, then only the chunks
 * store lacks over parallel Cas.Read streams. Every object is verified
 * before it is stored; chunks are made durable at least every second (a
 * killed pull keeps what it verified), all of them before the indexes, the
 * indexes before the manifest, and a name:tag ref is tagged locally last,
 * so a failure leaves no image that names missing objects. opts, image_out
 * and stats are nullable; stats are written also on failure. */
int st_client_pull(st_client *c, st_store *store, const char *ref, const st_transfer_opts *opts,
                   st_digest *image_out, st_transfer_stats *stats, st_error *err);

/* Pushes local image `ref` to the server: FindMissing, the missing chunks
 * over parallel Cas.Write streams, the indexes and manifest the server lacks
 * (PutBlob), then Images.Tag for a name:tag ref (role push). A push that
 * broke off resumes: only what the server still lacks is sent. */
int st_client_push(st_client *c, st_store *store, const char *ref, const st_transfer_opts *opts,
                   st_digest *image_out, st_transfer_stats *stats, st_error *err);

/* The ST_E* code for a grpc_status_code. */
int st_client_code_from_status(int status);

/* Sends one layer (a build context) to the server: FindMissing for its
 * chunks, the missing ones over `streams` Cas.Write streams, then its index
 * unless the server has it (role push). stats nullable. */
int st_client_push_layer(st_client *c, st_store *store, const st_digest *layer, unsigned streams,
                         st_transfer_stats *stats, st_error *err);

/* ---- builds (docs/BUILDS.md; role build for submit and cancel) ---- */

/* Builds.Submit of a request whose context (if any) is already on the
 * server. id_out gets "sha256:<hex>"; existing_out (nullable) whether an
 * identical submission existed. A recipe the server finds invalid is
 * ST_EINVAL (INVALID_ARGUMENT) with its "FILE:LINE:COL: ..." message. */
int st_client_build_submit(st_client *c, const st_build_request *req, char id_out[72],
                           bool *existing_out, st_error *err);

/* Called for each Watch message: a state (info, with ev NULL) or a layer or
 * log event (ev, with info NULL). Both borrowed for the call. A non-zero
 * return stops the watch and is returned. */
typedef int (*st_client_watch_fn)(const st_build_info *info, const st_bevent *ev, void *ud);
/* Builds.Watch until the build ends (or fn stops it). The last state is
 * left in *final_out (nullable; st_build_info_free). The call is subject to
 * the client's deadline: ST_ETIMEOUT means the build is still going. */
int st_client_build_watch(st_client *c, const char *id, st_client_watch_fn fn, void *ud,
                          st_build_info **final_out, st_error *err);
/* Builds.Get / Builds.Cancel: the build's record (st_build_info_free). Only
 * the fields the API carries are set: id, state, recipe name, submitted and
 * finished (whole seconds), error, images. */
int st_client_build_get(st_client *c, const char *id, st_build_info **out, st_error *err);
int st_client_build_cancel(st_client *c, const char *id, st_build_info **out, st_error *err);
/* Builds.List, oldest first (st_build_infos_free). */
int st_client_build_list(st_client *c, st_build_info ***out, size_t *n_out, st_error *err);
