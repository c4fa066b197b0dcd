/* SPDX-License-Identifier: Apache-2.0 */
/* The build queue of a build server: submitted builds (a recipe and its build context,
 * context.h) are recorded in the store as metadata (builds/<id>/record, .../recipe,
 * .../events), run by a fixed number of worker threads with the ordinary build engine, and
 * their progress is kept as a numbered event history that watchers read from any point, also
 * after the build ended or the server restarted. docs/BUILDS.md.
 *
 *              submit() [queue_submit]      a worker takes it [worker_main]
 *   (none) ───────────────────────> QUEUED ───────────────────────────> RUNNING
 *     FAILED, CANCELLED ── submit() ──^ │ cancel() [queue_cancel]       │ │ │
 *     (a retry: attempt + 1)            v                               │ │ └ cancel(): the
 *                                   CANCELLED                           │ │   flag stops it
 *          st_build_queue_free() while running [finish_build] <─────────┘ │   between layers,
 *          puts it back to QUEUED; it runs again after the next open      │   kills a running
 *                                                                         v   command: CANCELLED
 *                                                        SUCCEEDED or FAILED [finish_build]
 *   st_build_queue_open() [recover] finding RUNNING (the server died): FAILED
 *   "interrupted by server restart"; QUEUED builds are queued again.
 *
 * The build id is the SHA-256 of the request (recipe name and text, context digest, cell
 * filter, mtime): an identical submission returns the existing build unless that one failed
 * or was cancelled, in which case it is queued again under the same id. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "digest.h"
#include "error.h"
#include "store.h"

typedef enum {
  ST_BUILD_QUEUED = 0,
  ST_BUILD_RUNNING = 1,
  ST_BUILD_SUCCEEDED = 2,
  ST_BUILD_FAILED = 3,
  ST_BUILD_CANCELLED = 4,
} st_build_state;
#define ST_BUILD_STATE_COUNT 5

typedef enum {
  ST_LAYER_QUEUED = 0,  /* the cell's recipe is instantiated; the layer waits */
  ST_LAYER_RUNNING = 1, /* being built */
  ST_LAYER_CACHED = 2,  /* reused from the store */
  ST_LAYER_DONE = 3,    /* built */
  ST_LAYER_FAILED = 4,  /* its build failed (or was cancelled) */
} st_layer_state;

typedef enum {
  ST_BEV_STATE = 0, /* the build changed state */
  ST_BEV_LAYER = 1, /* a layer changed state */
  ST_BEV_LOG = 2,   /* a line printed by a `run` command */
  ST_BEV_IMAGE = 3, /* an image was stored and tagged */
} st_bevent_kind;

/* "queued", "running", ...; "?" for an unknown value. */
const char *st_build_state_name(st_build_state s);
const char *st_layer_state_name(st_layer_state s);
/* True for SUCCEEDED, FAILED and CANCELLED. */
bool st_build_state_final(st_build_state s);

/* One entry of a build's history. Strings owned, valid UTF-8, no control characters. */
typedef struct {
  uint64_t seq;               /* increasing within a build, across its attempts */
  double time;                /* wall clock, seconds since the epoch */
  st_bevent_kind kind;
  st_build_state state;       /* STATE: the new state */
  st_layer_state layer_state; /* LAYER */
  char *cell;                 /* LAYER, LOG, IMAGE: cell name ("" without a matrix) */
  char *layer;                /* LAYER, LOG: layer name */
  uint32_t index, count;      /* LAYER: position (0-based) and number of layers of the cell */
  uint64_t bytes;             /* LAYER cached, done: content bytes of the layer */
  uint64_t bytes_new;         /* LAYER done: compressed bytes it added to the store */
  double seconds;             /* LAYER done, failed: time spent building it */
  st_digest digest;           /* LAYER cached, done: the layer; IMAGE: the image */
  char *text;                 /* LOG: the line; IMAGE: "name:tag"; STATE failed, cancelled
                                 and LAYER failed: the error (nullable otherwise) */
} st_bevent;

void st_bevents_free(st_bevent *v, size_t n);

typedef struct {
  char *ref;        /* "name:tag" (owned) */
  char *cell;       /* the cell it was built for, "" without a matrix (owned) */
  st_digest digest; /* the image */
} st_build_image;

/* A build as last recorded. Everything owned (st_build_info_free). */
typedef struct {
  st_digest id;
  st_build_state state;
  uint32_t attempt;                    /* 1, or more after retries */
  st_build_request req;                /* what was submitted, recipe text included */
  double submitted, started, finished; /* wall clock; 0 = not yet */
  int error_code;                      /* FAILED, CANCELLED: the ST_E* code */
  char *error;                         /* FAILED, CANCELLED: one line */
  size_t n_images;
  st_build_image *images;              /* SUCCEEDED: one per cell, in cell order */
} st_build_info;

void st_build_info_free(st_build_info *info);
void st_build_infos_free(st_build_info **v, size_t n);

typedef struct {
  unsigned workers;   /* builds run at the same time (0 = 1) */
  unsigned threads;   /* chunk workers of each build (0 = inline) */
  const char *tmpdir; /* nullable: $TMPDIR, else /var/tmp; each build gets a private
                         directory below it for its context and run roots */
  size_t max_events;  /* history kept per build (0 = 10000); log lines go first */
} st_build_queue_opts;

typedef struct st_build_queue st_build_queue;

/* Called (from any thread, no lock held) after a build got new events or changed state. */
typedef void (*st_build_queue_notify_fn)(const st_digest *id, void *ud);

/* Loads the builds recorded in s (borrowed; must outlive the queue), marks those left
 * RUNNING by a previous process FAILED, queues the QUEUED ones again and starts the
 * workers. A record that cannot be read is skipped with a warning. *out written on success;
 * ST_ENOMEM or ST_EIO (threads, the store) otherwise. */
int st_build_queue_open(st_build_queue **out, st_store *s, const st_build_queue_opts *o,
                        st_error *err);
/* Stops the workers: running builds are stopped (their commands killed) and recorded QUEUED
 * again, so that they run after the next open. Wakes every waiting watcher. NULL is a no-op. */
void st_build_queue_free(st_build_queue *q);

/* Sets the notify hook (nullable) before or while the queue runs. */
void st_build_queue_set_notify(st_build_queue *q, st_build_queue_notify_fn fn, void *ud);

/* The build id a request gets. */
void st_build_request_id(const st_build_request *req, st_digest *out);

/* Submits a build. An identical request whose build is queued, running or succeeded returns
 * that build (*existing_out true). Otherwise the context is materialised (all its chunks must
 * be in the store) and the recipe loaded and instantiated for every selected cell before the
 * build is queued, so a bad request fails here: ST_EINVAL (malformed request, bad cell
 * filter), ST_EFORMAT/ST_ENOENT "FILE:LINE:COL: ..." (recipe, missing input), ST_EUNSAFE
 * (the recipe reads outside its context), ST_ENOENT (context layer or a chunk missing).
 * id_out and existing_out (nullable) are written on success. */
int st_build_queue_submit(st_build_queue *q, const st_build_request *req, st_digest *id_out,
                          bool *existing_out, st_error *err);

/* A copy of the build's record; ST_ENOENT "build sha256:... not found". */
int st_build_queue_get(st_build_queue *q, const st_digest *id, st_build_info **out,
                       st_error *err);
/* Copies of every build, oldest submission first. *out (st_build_infos_free) and *n_out are
 * written on success. */
int st_build_queue_list(st_build_queue *q, st_build_info ***out, size_t *n_out, st_error *err);

/* Cancels a build: a QUEUED build becomes CANCELLED at once; a RUNNING one is flagged and
 * becomes CANCELLED when its worker has stopped it (watch for the state event); a finished
 * build is left as it is. state_out (nullable) gets the state after the call.
 * ST_ENOENT if there is no such build. */
int st_build_queue_cancel(st_build_queue *q, const st_digest *id, st_build_state *state_out,
                          st_error *err);

/* The events of a build numbered above `after`, oldest first. Waits up to timeout_ms
 * (0: return at once, < 0: no limit) while there are none and the build has not ended.
 * *done_out is true when the build has ended and nothing more will come after the returned
 * events. *out (st_bevents_free; NULL when *n_out is 0) and *n_out written on success;
 * ST_ENOENT if there is no such build. The history is bounded (opts.max_events): a watcher
 * that falls behind may see a gap in the numbers where old log lines were dropped. */
int st_build_queue_events(st_build_queue *q, const st_digest *id, uint64_t after,
                          int timeout_ms, st_bevent **out, size_t *n_out, bool *done_out,
                          st_error *err);

/* Number of builds in each state (indexed by st_build_state). */
void st_build_queue_counts(st_build_queue *q, size_t counts[ST_BUILD_STATE_COUNT]);
