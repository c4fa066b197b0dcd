/* SPDX-License-Identifier: Apache-2.0 */
/* Images on the node, their removal, and garbage collection.
 *
 *   gc:  measure --> for each image, least recently used first, while over
 *        the limit: skip if kept (--keep) or in use (its checkout lock is
 *        held shared by a running environment), else st_node_remove
 *        (checkout renamed away under an exclusive checkout lock, refs and
 *        tags dropped) --> st_node_prune (repo refs of no remaining image,
 *        unreachable repo objects, cache objects no remaining image needs).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dset.h"
#include "layer-index.h"
#include "node.h"
#include "ostree-repo.h"
#include "unpack.h"

void st_node_images_free(st_node_image *imgs, size_t n) {
  for (size_t i = 0; imgs && i < n; i++) {
    for (size_t k = 0; k < imgs[i].n_tags; k++)
      free(imgs[i].tags[k]);
    free(imgs[i].tags);
  }
  free(imgs);
}

typedef struct {
  st_node_image *imgs;
  size_t n;
} img_list;

static int add_tag(const char *name, const char *tag, const st_digest *d, void *ud) {
  img_list *l = ud;
  for (size_t i = 0; i < l->n; i++) {
    if (!st_digest_equal(&l->imgs[i].digest, d))
      continue;
    char **nt = realloc(l->imgs[i].tags, (l->imgs[i].n_tags + 1) * sizeof *nt);
    if (!nt)
      return ST_ENOMEM;
    l->imgs[i].tags = nt;
    if (asprintf(&nt[l->imgs[i].n_tags], "%s:%s", name, tag) < 0)
      return ST_ENOMEM;
    l->imgs[i].n_tags++;
  }
  return 0;
}

/* 1 when an environment holds the checkout lock. */
static int checkout_in_use(st_node *n, const st_digest *d) {
  char hex[ST_DIGEST_HEX_LEN + 1], path[4096];
  snprintf(path, sizeof path, "%s/checkouts/%s.lock", st_node_dir(n), st_digest_hex(d, hex));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  int busy = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
  close(fd);
  return busy;
}

static int cmp_lru(const void *a, const void *b) {
  const st_node_image *x = a, *y = b;
  if (x->last_used != y->last_used)
    return x->last_used < y->last_used ? -1 : 1;
  return memcmp(x->digest.bytes, y->digest.bytes, ST_DIGEST_LEN);
}

int st_node_images(st_node *n, st_node_image **out, size_t *n_out, st_error *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/checkouts", st_node_dir(n));
  DIR *dir = opendir(path);
  if (!dir)
    return st_error_errno(err, errno, "node %s", st_node_dir(n));
  img_list l = {0};
  int rc = ST_OK;
  struct dirent *de;
  while ((de = readdir(dir))) {
    st_digest d;
    if (strlen(de->d_name) != ST_DIGEST_HEX_LEN || st_digest_parse(&d, de->d_name, NULL) < 0)
      continue;
    st_node_image *ni = realloc(l.imgs, (l.n + 1) * sizeof *ni);
    if (!ni) {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
      break;
    }
    l.imgs = ni;
    st_node_image *im = &l.imgs[l.n++];
    memset(im, 0, sizeof *im);
    im->digest = d;
    st_image *img = NULL;
    if (st_image_load(&img, st_node_cache(n), &d, NULL) == ST_OK) {
      for (size_t k = 0; k < img->n_layers; k++)
        im->size += img->layers[k].size;
      st_image_free(img);
    }
    char used[4096];
    struct stat st;
    snprintf(used, sizeof used, "%s/used/%s", st_node_dir(n), de->d_name);
    if (stat(used, &st) == 0)
      im->last_used = st.st_mtim.tv_sec;
    im->in_use = checkout_in_use(n, &d);
  }
  closedir(dir);
  if (rc == ST_OK && st_tag_list(st_node_cache(n), add_tag, &l, err) < 0)
    rc = err->code ? err->code : st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc < 0) {
    st_node_images_free(l.imgs, l.n);
    return rc;
  }
  if (l.n)
    qsort(l.imgs, l.n, sizeof *l.imgs, cmp_lru);
  *out = l.imgs;
  *n_out = l.n;
  return ST_OK;
}

static uint64_t du_total;
static int du_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  du_total += (uint64_t)st->st_blocks * 512;
  return 0;
}

int st_node_usage(st_node *n, uint64_t *out, st_error *err) {
  static const char *const parts[] = {"repo", "cache"};
  uint64_t total = 0;
  for (size_t i = 0; i < ST_ARRAY_SIZE(parts); i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", st_node_dir(n), parts[i]);
    du_total = 0;
    if (access(path, F_OK) == 0 && nftw(path, du_one, 32, FTW_PHYS) < 0)
      return st_error_errno(err, errno, "node %s: size", path);
    total += du_total;
  }
  *out = total;
  return ST_OK;
}

typedef struct {
  const st_digest *d;
  st_store *cache;
  st_error *err;
} untag_ctx;

static int untag(const char *name, const char *tag, const st_digest *d, void *ud) {
  untag_ctx *u = ud;
  if (st_digest_equal(d, u->d))
    return st_tag_delete(u->cache, name, tag, u->err) < 0 ? -1 : 0;
  return 0;
}

int st_node_remove(st_node *n, const st_digest *image, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], lockp[4096], dir[4096], tmp[256];
  st_digest_hex(image, hex);
  snprintf(dir, sizeof dir, "%s/checkouts", st_node_dir(n));
  snprintf(lockp, sizeof lockp, "%s/%s.lock", dir, hex);
  _cleanup_close_ int lfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0)
    return st_error_errno(err, errno, "node %s: %s", st_node_dir(n), lockp);
  if (flock(lfd, LOCK_EX | LOCK_NB) < 0)
    return errno == EWOULDBLOCK
               ? st_error_set(err, ST_EBUSY, "image sha256:%s is in use by a running environment",
                              hex)
               : st_error_errno(err, errno, "node %s: %s", st_node_dir(n), lockp);
  _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return st_error_errno(err, errno, "node %s", st_node_dir(n));
  snprintf(tmp, sizeof tmp, ".tmp-rm-%s-%ld", hex, (long)getpid());
  if (renameat(dfd, hex, dfd, tmp) < 0 && errno != ENOENT)
    return st_error_errno(err, errno, "node %s: checkout %s", st_node_dir(n), hex);
  int rc = st_remove_tree(dfd, tmp, err);
  if (rc < 0 && rc != ST_ENOENT)
    return rc;
  unlinkat(dfd, lockp + strlen(dir) + 1, 0);
  char used[4096];
  snprintf(used, sizeof used, "%s/used/%s", st_node_dir(n), hex);
  unlink(used);
  st_ostree *repo = NULL;
  if ((rc = st_node_repo(n, &repo, err)) < 0 || (rc = st_ostree_delete_image(repo, image, err)) < 0)
    return rc;
  untag_ctx u = {image, st_node_cache(n), err};
  if (st_tag_list(st_node_cache(n), untag, &u, err) < 0)
    return err->code ? err->code : ST_EIO;
  return ST_OK;
}

/* ---- prune ------------------------------------------------------------------ */

typedef struct {
  st_node *n;
  st_ostree *repo;
  st_dset *images, *layers, *chunks;
  st_error *err;
  uint64_t freed;
} prune_ctx;

static int drop_image_ref(const st_digest *d, void *ud) {
  prune_ctx *p = ud;
  if (st_dset_get(p->images, d, NULL))
    return 0;
  return st_ostree_delete_image(p->repo, d, p->err) < 0 ? -1 : 0;
}

static int drop_layer_ref(const st_digest *d, void *ud) {
  prune_ctx *p = ud;
  if (st_dset_get(p->layers, d, NULL))
    return 0;
  return st_ostree_delete_layer(p->repo, d, p->err) < 0 ? -1 : 0;
}

/* What the remaining images need in the cache. */
static int keep_set(prune_ctx *p, const st_node_image *imgs, size_t n, st_error *err) {
  for (size_t i = 0; i < n; i++) {
    if (st_dset_insert(p->images, &imgs[i].digest, 0) < 0)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    _cleanup_(st_image_freep) st_image *img = NULL;
    int rc = st_image_load(&img, st_node_cache(p->n), &imgs[i].digest, err);
    if (rc < 0)
      return rc;
    for (size_t k = 0; k < img->n_layers; k++) {
      if (st_dset_insert(p->layers, &img->layers[k].digest, 0) < 0)
        return st_error_set(err, ST_ENOMEM, "out of memory");
      _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
      rc = st_layer_index_load(&idx, st_node_cache(p->n), &img->layers[k].digest, err);
      if (rc == ST_ENOENT)
        continue; /* committed, its chunks were never needed here */
      if (rc < 0)
        return rc;
      for (size_t e = 0; e < st_layer_index_count(idx); e++) {
        const st_entry *en = st_layer_index_entry(idx, e);
        for (size_t c = 0; c < en->n_chunks; c++)
          if (st_dset_insert(p->chunks, &en->chunks[c].digest, 0) < 0)
            return st_error_set(err, ST_ENOMEM, "out of memory");
      }
    }
  }
  return ST_OK;
}

typedef struct {
  prune_ctx *p;
  st_kind kind;
  const st_dset *keep;
  st_digest *drop;
  uint64_t *sizes;
  size_t n, cap;
} drop_list;

static int collect_drop(const st_digest *d, uint64_t stored, void *ud) {
  drop_list *l = ud;
  if (st_dset_get(l->keep, d, NULL))
    return 0;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    st_digest *nd = realloc(l->drop, cap * sizeof *nd);
    uint64_t *ns = nd ? realloc(l->sizes, cap * sizeof *ns) : NULL;
    if (nd)
      l->drop = nd;
    if (!ns)
      return ST_ENOMEM;
    l->sizes = ns;
    l->cap = cap;
  }
  l->sizes[l->n] = stored;
  l->drop[l->n++] = *d;
  return 0;
}

static int prune_kind(prune_ctx *p, st_kind kind, const st_dset *keep, st_error *err) {
  drop_list l = {.p = p, .kind = kind, .keep = keep};
  st_store *cache = st_node_cache(p->n);
  int rc = st_store_list(cache, kind, collect_drop, &l, err);
  if (rc == ST_ENOMEM)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; rc >= 0 && i < l.n; i++) {
    rc = st_store_del(cache, kind, &l.drop[i], err);
    if (rc == ST_OK)
      p->freed += l.sizes[i];
  }
  free(l.drop);
  free(l.sizes);
  return rc < 0 ? rc : ST_OK;
}

int st_node_prune(st_node *n, uint64_t *freed_out, st_error *err) {
  st_node_image *imgs = NULL;
  size_t n_imgs = 0;
  prune_ctx p = {.n = n, .err = err};
  int rc = st_node_repo(n, &p.repo, err);
  if (rc < 0)
    return rc;
  if ((rc = st_node_images(n, &imgs, &n_imgs, err)) < 0)
    return rc;
  p.images = st_dset_new();
  p.layers = st_dset_new();
  p.chunks = st_dset_new();
  if (!p.images || !p.layers || !p.chunks)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK)
    rc = keep_set(&p, imgs, n_imgs, err);
  if (rc == ST_OK && st_ostree_list(p.repo, true, drop_image_ref, &p, err) != 0)
    rc = err->code;
  if (rc == ST_OK && st_ostree_list(p.repo, false, drop_layer_ref, &p, err) != 0)
    rc = err->code;
  uint64_t freed = 0;
  if (rc == ST_OK)
    rc = st_ostree_prune(p.repo, &freed, err);
  if (rc == ST_OK)
    rc = prune_kind(&p, ST_KIND_MANIFEST, p.images, err);
  if (rc == ST_OK)
    rc = prune_kind(&p, ST_KIND_INDEX, p.layers, err);
  if (rc == ST_OK)
    rc = prune_kind(&p, ST_KIND_CHUNK, p.chunks, err);
  if (rc == ST_OK)
    rc = st_store_flush(st_node_cache(n), err);
  if (freed_out)
    *freed_out = freed + p.freed;
  st_dset_free(p.images);
  st_dset_free(p.layers);
  st_dset_free(p.chunks);
  st_node_images_free(imgs, n_imgs);
  return rc;
}

static bool kept(const st_digest *keep, size_t n_keep, const st_digest *d) {
  for (size_t i = 0; i < n_keep; i++)
    if (st_digest_equal(&keep[i], d))
      return true;
  return false;
}

int st_node_gc(st_node *n, const st_digest *keep, size_t n_keep, uint64_t max_bytes,
               st_gc_result *res, st_error *err) {
  memset(res, 0, sizeof *res);
  int rc = st_node_prune(n, NULL, err);
  if (rc < 0 || (rc = st_node_usage(n, &res->bytes_before, err)) < 0)
    return rc;
  uint64_t usage = res->bytes_before;
  if (max_bytes) {
    st_node_image *imgs = NULL;
    size_t n_imgs = 0;
    if ((rc = st_node_images(n, &imgs, &n_imgs, err)) < 0)
      return rc;
    for (size_t i = 0; i < n_imgs && usage > max_bytes && rc == ST_OK; i++) {
      if (kept(keep, n_keep, &imgs[i].digest)) {
        res->kept_pinned++;
        continue;
      }
      rc = st_node_remove(n, &imgs[i].digest, err);
      if (rc == ST_EBUSY) {
        res->kept_in_use++;
        rc = ST_OK;
        continue;
      }
      if (rc == ST_OK && (rc = st_node_prune(n, NULL, err)) == ST_OK &&
          (rc = st_node_usage(n, &usage, err)) == ST_OK)
        res->removed++;
    }
    st_node_images_free(imgs, n_imgs);
  }
  res->bytes_after = usage;
  return rc;
}
