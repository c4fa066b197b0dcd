/* SPDX-License-Identifier: Apache-2.0 */
/* The server image source for the pre-warm: st_client_pull into the node
 * cache (server/client.h). */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "node.h"

typedef struct {
  st_client *client;
  unsigned streams;
} server_src;

static int server_resolve(st_node_source *s, const char *ref, st_digest *out, st_error *err) {
  server_src *ss = s->impl;
  if (strncmp(ref, "sha256:", 7) == 0)
    return st_digest_parse(out, ref, err);
  int rc = st_client_resolve(ss->client, ref, out, err);
  if (rc == ST_ENOENT)
    return st_error_set(err, ST_ENOENT, "image %s not found on server %s", ref, s->name);
  return rc;
}

static int server_pull(st_node_source *s, st_store *cache, const st_digest *image,
                       const st_copy_opts *opts, st_copy_stats *stats, st_error *err) {
  server_src *ss = s->impl;
  char ref[ST_DIGEST_HEX_LEN + 8] = "sha256:";
  st_digest_hex(image, ref + 7);
  st_transfer_stats ts = {0};
  st_transfer_opts to = {.streams = ss->streams, .max_rate = opts->max_rate,
                        .progress = opts->progress, .progress_ud = opts->progress_ud};
  int rc = st_client_pull(ss->client, cache, ref, &to, NULL, &ts, err);
  stats->chunks_needed += ts.chunks_total;
  stats->chunks_fetched += ts.chunks_moved;
  stats->bytes_fetched += ts.bytes_moved;
  stats->bytes_reused += ts.chunk_bytes_present;
  stats->bytes_needed += ts.chunk_bytes_moved + ts.chunk_bytes_present;
  stats->layers_copied += ts.layers_moved;
  return rc;
}

static void server_free(st_node_source *s) {
  server_src *ss = s->impl;
  if (ss)
    st_client_free(ss->client);
  free(ss);
}

int st_node_source_server(st_node_source **out, st_client *client, const char *name,
                          unsigned streams, st_error *err) {
  st_node_source *s = calloc(1, sizeof *s);
  server_src *ss = calloc(1, sizeof *ss);
  if (!s || !ss || !(s->name = strdup(name))) {
    free(s);
    free(ss);
    st_client_free(client);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  ss->client = client;
  ss->streams = streams;
  s->resolve = server_resolve;
  s->pull = server_pull;
  s->free = server_free;
  s->impl = ss;
  *out = s;
  return ST_OK;
}
