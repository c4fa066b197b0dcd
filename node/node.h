/* SPDX-License-Identifier: Apache-2.0 */
/* A node directory (docs/NODE.md): the chunk cache, the OSTree repo, one
 * read-only checkout per pre-warmed image, tags and last-use records, and
 * the lock that serialises pre-warm, gc and removal.
 *
 *   DIR/lock                   flock: prewarm, gc, env rm (exclusive)
 *   DIR/cache/                 st_store: manifests, layer indexes, chunks, tags
 *   DIR/repo/                  OSTree repo (bare as root, else bare-user-only)
 *   DIR/checkouts/<hex>/       the image's checkout (read-only, hardlinks)
 *   DIR/checkouts/<hex>.lock   flock: shared while an environment runs on it
 *   DIR/used/<hex>             mtime = last use (env run, first pre-warm)
 *   DIR/run/                   mount point of a run's private tmpfs
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cleanup.h"
#include "digest.h"
#include "error.h"
#include "image-copy.h"
#include "image.h"
#include "store.h"

typedef struct st_node st_node;
typedef struct st_ostree st_ostree;

/* Opens DIR; with create, makes it (and its parts) when missing. Without
 * create a missing DIR is ST_ENOENT naming it. */
int st_node_open(st_node **out, const char *dir, bool create, st_error *err);
void st_node_free(st_node *n);
ST_DEFINE_FREEP(st_node, st_node_free)
const char *st_node_dir(const st_node *n);
st_store *st_node_cache(st_node *n);
/* Opens the OSTree repo on first use. */
int st_node_repo(st_node *n, st_ostree **out, st_error *err);

/* The default node directory: $STRATA_NODE_DIR, else /var/lib/strata/node
 * for root, else $XDG_DATA_HOME (or ~/.local/share) + /strata/node. */
char *st_node_default_dir(void);

/* Takes the node lock (exclusive). wait=false: ST_EBUSY naming the holder's
 * pid when another process has it; wait=true: calls waiting (nullable) once,
 * then blocks. Released by st_node_unlock or st_node_free (or the process
 * dying: kill -9 never leaves a stale lock). Also removes what a killed run
 * left behind (staging checkouts). */
int st_node_lock(st_node *n, bool wait, void (*waiting)(pid_t holder, void *ud), void *ud,
                 st_error *err);
void st_node_unlock(st_node *n);

/* "name:tag" (a tag recorded on this node) or "sha256:<hex>". The image
 * must be pre-warmed (its checkout exists): ST_ENOENT otherwise. */
int st_node_resolve(st_node *n, const char *ref, st_digest *out, st_error *err);
/* Path of the image's checkout, malloc'd. */
char *st_node_checkout_path(const st_node *n, const st_digest *image);
bool st_node_has_checkout(const st_node *n, const st_digest *image);
/* Sets the last-use time of the image to now (creates the record). */
void st_node_touch(st_node *n, const st_digest *image, bool only_if_missing);

/* ---- pre-warm (prewarm.c) --------------------------------------------- */

/* Where images come from: a local store or a server. */
typedef struct st_node_source st_node_source;
struct st_node_source {
  char *name; /* for messages (owned) */
  /* Resolves "name:tag" or "sha256:..." at the source. */
  int (*resolve)(st_node_source *s, const char *ref, st_digest *out, st_error *err);
  /* Brings the image's manifest, the wanted layers' indexes and the chunks
   * the cache lacks into cache, verified; accumulates stats. */
  int (*pull)(st_node_source *s, st_store *cache, const st_digest *image,
              const st_copy_opts *opts, st_copy_stats *stats, st_error *err);
  void (*free)(st_node_source *s);
  void *impl;
};
void st_node_source_free(st_node_source *s);
ST_DEFINE_FREEP(st_node_source, st_node_source_free)
/* A local store directory as the source. */
int st_node_source_store(st_node_source **out, const char *dir, st_error *err);

typedef struct {
  unsigned threads;  /* fetch and write workers; 0 = inline */
  uint64_t max_rate; /* bytes per second for fetching, 0 = unlimited */
  bool progress;     /* draw a progress line (stderr, TTY) */
} st_prewarm_opts;

typedef struct {
  st_digest digest;     /* valid when resolved */
  bool resolved;
  bool was_ready;       /* nothing to do: commit and checkout existed */
  st_copy_stats copy;   /* what was fetched and reused */
  uint64_t layers_total, layers_committed;
  uint64_t files;       /* entries of the layers committed by this run */
  uint64_t files_reused; /* ... of them regular files whose object the repo had */
  double seconds;       /* all of it; then its phases: */
  double fetch_seconds, commit_seconds, checkout_seconds;
} st_prewarm_result;

/* Pre-warms one image (the caller holds the node lock): resolve at the
 * source, pull what the node lacks into the cache, commit missing layers,
 * compose the image commit, check it out, record the tag. res is filled
 * as far as it got, also on failure. */
int st_node_prewarm(st_node *n, st_node_source *src, const char *ref,
                    const st_prewarm_opts *opts, st_prewarm_result *res, st_error *err);

/* ---- images, removal, gc (gc.c) --------------------------------------- */

typedef struct {
  st_digest digest;
  char **tags;      /* owned, "name:tag" */
  size_t n_tags;
  uint64_t size;    /* content bytes of the image's layers */
  int64_t last_used; /* unix seconds, 0 unknown */
  bool in_use;      /* an environment runs on it now */
} st_node_image;

void st_node_images_free(st_node_image *imgs, size_t n);
/* Every pre-warmed image, least recently used first. */
int st_node_images(st_node *n, st_node_image **out, size_t *n_out, st_error *err);
/* Bytes the node directory takes on disk (repo + cache). */
int st_node_usage(st_node *n, uint64_t *out, st_error *err);

/* Removes an image (caller holds the node lock): ST_EBUSY when an
 * environment runs on it. Objects are freed by st_node_prune. */
int st_node_remove(st_node *n, const st_digest *image, st_error *err);
/* Drops repo objects and cache objects no remaining image needs. */
int st_node_prune(st_node *n, uint64_t *freed_out, st_error *err);

typedef struct {
  size_t removed, kept_in_use, kept_pinned;
  uint64_t bytes_before, bytes_after;
} st_gc_result;
/* Removes least-recently-used images, never one in keep or in use, until
 * the node takes at most max_bytes (0: remove nothing, only prune). */
int st_node_gc(st_node *n, const st_digest *keep, size_t n_keep, uint64_t max_bytes,
               st_gc_result *res, st_error *err);

/* ---- environments (env.c) ------------------------------------------------ */

typedef struct {
  const char *const *cmd; /* NULL-terminated; NULL or empty: the entrypoint */
  const char *workdir;    /* nullable: the image's */
  const char *const *env; /* NULL-terminated "K=V" added to the image's; nullable */
  bool gpu;               /* bind NVIDIA devices and driver libraries when present */
} st_env_opts;

/* Runs the command in a sandbox on the image's checkout with a private
 * writable overlay; waits. Returns the command's exit status (128 + signal
 * when killed) in *status_out. Errors before the command starts are
 * returned as st_error. */
int st_env_run(st_node *n, const char *ref, const st_env_opts *opts, int *status_out,
               st_error *err);

/* A strata server as the source (consumes client, also on failure): the
 * client's pull brings the manifest, the indexes the cache lacks and only
 * the missing chunks over `streams` parallel streams (0: the client's
 * default), at most opts->max_rate bytes per second. */
typedef struct st_client st_client;
int st_node_source_server(st_node_source **out, st_client *client, const char *name,
                          unsigned streams, st_error *err);
