/* SPDX-License-Identifier: Apache-2.0 */
/* Pre-warming one image onto the node (the caller holds the node lock).
 *
 *   RESOLVE --(src->resolve)--> digest
 *      | image ref and checkout exist: READY (nothing fetched)
 *   PULL    --(src->pull: manifest, indexes and chunks the cache lacks,
 *              only for layers with no commit yet; each chunk verified)
 *   COMMIT  --(st_ostree_write_layer, one transaction per missing layer)
 *   COMPOSE --(st_ostree_write_image: dirtree merge, whiteouts)
 *   CHECKOUT--(st_ostree_checkout_image into checkouts/.tmp-<hex>-<pid>,
 *              rename to checkouts/<hex>)
 *   TAG     --(st_tag_set in the cache store)--> READY
 *
 * Every step is idempotent and each leaves the node consistent when the
 * process dies in it: chunks and indexes are published only complete, a
 * commit's ref appears only at the end of its transaction, a checkout only
 * by its rename. A re-run resumes at the first step whose result is
 * missing; verified chunks are never fetched twice. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"
#include "node.h"
#include "ostree-repo.h"
#include "progress.h"
#include "unpack.h"


typedef struct {
  st_ostree *repo;
  st_error err;
  bool failed;
} want_ctx;

static bool want_layer(const st_digest *layer, void *ud) {
  want_ctx *w = ud;
  int rc = st_ostree_has_layer(w->repo, layer, &w->err);
  if (rc < 0)
    w->failed = true;
  return rc == 0;
}

static void progress_cb(uint64_t done, uint64_t total, void *ud) {
  st_progress_set_total(ud, total);
  st_progress_update(ud, done);
}

static int checkout(st_node *n, st_ostree *repo, const st_digest *d, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], tmp[128], final[128], dir[4096];
  st_digest_hex(d, hex);
  snprintf(tmp, sizeof tmp, ".tmp-%s-%ld", hex, (long)getpid());
  snprintf(final, sizeof final, "%s", hex);
  snprintf(dir, sizeof dir, "%s/checkouts", st_node_dir(n));
  _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return st_error_errno(err, errno, "node %s: checkouts", st_node_dir(n));
  st_remove_tree(dfd, tmp, NULL);
  int rc = st_ostree_checkout_image(repo, d, dfd, tmp, err);
  if (rc < 0) {
    st_remove_tree(dfd, tmp, NULL);
    return rc;
  }
  if (renameat(dfd, tmp, dfd, final) < 0) {
    int e = errno;
    st_remove_tree(dfd, tmp, NULL);
    return st_error_errno(err, e, "node %s: checkout of sha256:%s", st_node_dir(n), hex);
  }
  return st_fsync_dir_at(dfd, ".", err);
}

static int record_tag(st_node *n, const char *ref, const st_digest *d, st_error *err) {
  if (strncmp(ref, "sha256:", 7) == 0)
    return ST_OK;
  _cleanup_free_ char *name = NULL, *tag = NULL;
  int rc = st_image_ref_parse(ref, &name, &tag, err);
  if (rc < 0)
    return rc;
  return st_tag_set(st_node_cache(n), name, tag, d, err);
}

static int commit_layers(st_node *n, st_ostree *repo, const st_image *img,
                         const st_prewarm_opts *opts, st_prewarm_result *res, st_error *err) {
  st_digest *layers = calloc(img->n_layers + 1, sizeof *layers);
  if (!layers)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = ST_OK;
  for (size_t i = 0; i < img->n_layers && rc == ST_OK; i++) {
    layers[i] = img->layers[i].digest;
    rc = st_ostree_has_layer(repo, &layers[i], err);
    if (rc == 0) {
      st_ostree_layer_stats ls = {0};
      if ((rc = st_ostree_write_layer(repo, st_node_cache(n), &layers[i], opts->threads, &ls,
                                      err)) == ST_OK) {
        res->layers_committed++;
        res->files += ls.files;
        res->files_reused += ls.files_reused;
      }
    } else if (rc > 0)
      rc = ST_OK;
  }
  if (rc == ST_OK)
    rc = st_ostree_write_image(repo, &res->digest, layers, img->n_layers, err);
  free(layers);
  return rc;
}

static int prewarm(st_node *n, st_node_source *src, const char *ref, const st_prewarm_opts *opts,
                   st_prewarm_result *res, st_error *err) {
  int rc = src->resolve(src, ref, &res->digest, err);
  if (rc < 0)
    return rc;
  res->resolved = true;
  st_ostree *repo = NULL;
  if ((rc = st_node_repo(n, &repo, err)) < 0)
    return rc;
  rc = st_ostree_has_image(repo, &res->digest, err);
  if (rc < 0)
    return rc;
  bool have_commit = rc == 1;
  if (have_commit && st_node_has_checkout(n, &res->digest)) {
    res->was_ready = true;
    _cleanup_(st_image_freep) st_image *img = NULL;
    if (st_image_load(&img, st_node_cache(n), &res->digest, NULL) == ST_OK)
      res->layers_total = img->n_layers;
    return record_tag(n, ref, &res->digest, err);
  }
  if (!have_commit) {
    want_ctx w = {.repo = repo};
    _cleanup_(st_progress_freep) st_progress *p = st_progress_new(ref, 0, opts->progress);
    st_copy_opts co = {.threads = opts->threads, .max_rate = opts->max_rate,
                       .want_layer = want_layer, .want_ud = &w,
                       .progress = p ? progress_cb : NULL, .progress_ud = p};
    double t = st_now();
    rc = src->pull(src, st_node_cache(n), &res->digest, &co, &res->copy, err);
    res->fetch_seconds = st_now() - t;
    if (rc == ST_OK && w.failed) {
      *err = w.err;
      rc = err->code;
    }
    if (rc < 0)
      return rc;
  }
  _cleanup_(st_image_freep) st_image *img = NULL;
  if ((rc = st_image_load(&img, st_node_cache(n), &res->digest, err)) < 0)
    return rc;
  res->layers_total = img->n_layers;
  double t = st_now();
  if (!have_commit && (rc = commit_layers(n, repo, img, opts, res, err)) < 0)
    return rc;
  res->commit_seconds = st_now() - t;
  t = st_now();
  if ((rc = checkout(n, repo, &res->digest, err)) < 0)
    return rc;
  res->checkout_seconds = st_now() - t;
  st_node_touch(n, &res->digest, true);
  return record_tag(n, ref, &res->digest, err);
}

int st_node_prewarm(st_node *n, st_node_source *src, const char *ref,
                    const st_prewarm_opts *opts, st_prewarm_result *res, st_error *err) {
  double t0 = st_now();
  memset(res, 0, sizeof *res);
  int rc = prewarm(n, src, ref, opts, res, err);
  res->seconds = st_now() - t0;
  return rc;
}
