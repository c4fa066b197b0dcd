/* SPDX-License-Identifier: Apache-2.0 */
/* Publishing a strata image as an OCI image layout: layer blobs (made in
 * parallel, or found from an earlier publish), the config with diff_ids, the
 * manifest, and index.json naming it by tag. Same image, same bytes. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "oci-private.h"
#include "pool.h"
#include "progress.h"

const char *st_oci_layer_media_type(st_oci_compression c) {
  return c == ST_OCI_ZSTD ? ST_OCI_MT_LAYER_ZSTD : ST_OCI_MT_LAYER_GZIP;
}

static void cache_name(char *buf, size_t len, const st_digest *layer, st_oci_compression c) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  st_digest_hex(layer, hex);
  /* gzip2: block-parallel gzip (gzip-blocks.c). Records under oci/gzip/ are
   * of the single-stream gzip of earlier versions, whose blobs differ. */
  snprintf(buf, len, "oci/%s/%.2s/%s", c == ST_OCI_ZSTD ? "zstd" : "gzip2", hex, hex);
}

bool st_oci_cache_get(st_store *s, const st_digest *layer, st_oci_compression c,
                      st_oci_blob_info *out) {
  char name[128];
  cache_name(name, sizeof name, layer, c);
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  if (st_store_meta_get(s, name, 512, &data, &len, NULL) < 0)
    return false;
  char blob[80], diff[80];
  unsigned long long size, tar_size;
  if (sscanf((char *)data, "%79s %llu %79s %llu", blob, &size, diff, &tar_size) != 4)
    return false;
  st_oci_blob_info bi = {.size = size, .tar_size = tar_size};
  if (st_digest_parse(&bi.digest, blob, NULL) < 0 || st_digest_parse(&bi.diff_id, diff, NULL) < 0)
    return false;
  *out = bi;
  return true;
}

static void cache_put(st_store *s, const st_digest *layer, st_oci_compression c,
                      const st_oci_blob_info *bi) {
  char name[128], line[256], a[ST_DIGEST_HEX_LEN + 1], b[ST_DIGEST_HEX_LEN + 1];
  cache_name(name, sizeof name, layer, c);
  int n = snprintf(line, sizeof line, "sha256:%s %llu sha256:%s %llu\n",
                   st_digest_hex(&bi->digest, a), (unsigned long long)bi->size,
                   st_digest_hex(&bi->diff_id, b), (unsigned long long)bi->tar_size);
  if (st_store_meta_put(s, name, line, (size_t)n, NULL) < 0)
    st_debug("could not record the OCI blob of layer %s", a);
}

static int tmp_open(const char *dir, char *path, size_t len, st_error *err) {
  static unsigned counter;
  unsigned n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
  snprintf(path, len, "%s/.strata-tmp-%d-%u", dir, (int)getpid(), n);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return st_error_errno(err, errno, "create %s", path);
  return fd;
}

/* Renames tmp to dir/<hex>. */
static int tmp_commit(const char *dir, const char *tmp, const st_digest *d, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], final[PATH_MAX];
  snprintf(final, sizeof final, "%s/%s", dir, st_digest_hex(d, hex));
  if (rename(tmp, final) < 0) {
    int e = errno;
    unlink(tmp);
    return st_error_errno(err, e, "rename %s", final);
  }
  return ST_OK;
}

int st_oci_write_blob(const char *dir, const void *data, size_t len, st_digest *digest_out,
                      st_error *err) {
  st_digest d;
  st_sha256(&d, data, len);
  char hex[ST_DIGEST_HEX_LEN + 1], final[PATH_MAX], tmp[PATH_MAX];
  snprintf(final, sizeof final, "%s/%s", dir, st_digest_hex(&d, hex));
  struct stat st;
  if (stat(final, &st) < 0 || (uint64_t)st.st_size != len) {
    int fd = tmp_open(dir, tmp, sizeof tmp, err);
    if (fd < 0)
      return fd;
    int rc = st_write_all(fd, data, len);
    close(fd);
    if (rc < 0) {
      unlink(tmp);
      return st_error_errno(err, -rc, "write %s", tmp);
    }
    if ((rc = tmp_commit(dir, tmp, &d, err)) < 0)
      return rc;
  }
  if (digest_out)
    *digest_out = d;
  return ST_OK;
}

/* ---- making layer blobs in parallel ---- */

struct make_ctx {
  st_store *s;
  st_oci_compression c;
  st_oci_gzip_pool *gz; /* nullable */
  const char *dir;
  pthread_mutex_t lock;
  st_error err; /* first failure */
  bool failed;
  st_progress *progress;
  uint64_t done;
};

struct make_job {
  struct make_ctx *m;
  const st_image_layer *layer;
  st_oci_blob_info *info;
};

static int make_one(struct make_ctx *m, const st_image_layer *l, st_oci_blob_info *info,
                    st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], tmp[PATH_MAX];
  st_digest_hex(&l->digest, hex);
  _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
  int rc = st_layer_index_load(&idx, m->s, &l->digest, err);
  if (rc < 0)
    return rc;
  int fd = tmp_open(m->dir, tmp, sizeof tmp, err);
  if (fd < 0)
    return fd;
  st_oci_blob_info bi;
  rc = st_oci_layer_write(m->s, idx, m->c, m->gz, fd, &bi, err);
  if (close(fd) < 0 && rc == ST_OK)
    rc = st_error_errno(err, errno, "write %s", tmp);
  if (rc < 0) {
    unlink(tmp);
    return st_error_prefix(err, "layer %s (sha256:%.12s)", l->name, hex);
  }
  st_oci_blob_info old;
  if (st_oci_cache_get(m->s, &l->digest, m->c, &old) &&
      (!st_digest_equal(&old.digest, &bi.digest) || !st_digest_equal(&old.diff_id, &bi.diff_id))) {
    unlink(tmp);
    return st_error_set(err, ST_ECORRUPT, "layer %s (sha256:%.12s): its tar differs from the "
                        "one published before", l->name, hex);
  }
  if ((rc = tmp_commit(m->dir, tmp, &bi.digest, err)) < 0)
    return rc;
  cache_put(m->s, &l->digest, m->c, &bi);
  *info = bi;
  return ST_OK;
}

static void make_job_run(void *arg) {
  struct make_job *j = arg;
  struct make_ctx *m = j->m;
  st_error err = {0};
  int rc = m->failed ? ST_ECANCELED : make_one(m, j->layer, j->info, &err);
  pthread_mutex_lock(&m->lock);
  if (rc < 0 && rc != ST_ECANCELED && !m->failed) {
    m->failed = true;
    m->err = err;
  }
  m->done += j->layer->size;
  st_progress_update(m->progress, m->done);
  pthread_mutex_unlock(&m->lock);
  free(j);
}

int st_oci_make_layers(st_store *s, const st_image *img, const bool *want, st_oci_compression c,
                       const char *dir, unsigned threads, bool progress,
                       st_oci_blob_info *infos, st_error *err) {
  uint64_t total = 0;
  for (size_t i = 0; i < img->n_layers; i++)
    total += want[i] ? img->layers[i].size : 0;
  struct make_ctx m = {.s = s, .c = c, .dir = dir};
  pthread_mutex_init(&m.lock, NULL);
  m.progress = st_progress_new("layer tars", total, progress);
  st_pool *pool = NULL;
  /* layers on `threads` workers, and their gzip blocks on as many more */
  int rc = c == ST_OCI_GZIP ? st_oci_gzip_pool_new(&m.gz, threads, err) : ST_OK;
  if (rc == ST_OK)
    rc = st_pool_new(&pool, threads, 0, err);
  for (size_t i = 0; rc == ST_OK && i < img->n_layers; i++) {
    if (!want[i])
      continue;
    struct make_job *j = malloc(sizeof *j);
    if (!j) {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
      break;
    }
    *j = (struct make_job){&m, &img->layers[i], &infos[i]};
    st_pool_submit(pool, make_job_run, j);
  }
  st_pool_free(pool);
  st_oci_gzip_pool_free(m.gz);
  st_progress_free(m.progress);
  pthread_mutex_destroy(&m.lock);
  if (rc == ST_OK && m.failed) {
    if (err)
      *err = m.err;
    rc = m.err.code;
  }
  return rc;
}

int st_oci_image_docs(const st_image *img, const st_oci_blob_info *infos, st_oci_compression c,
                      char **config_json, size_t *config_len, char **manifest_json,
                      size_t *manifest_len, st_error *err) {
  _cleanup_free_ st_digest *ids = calloc(img->n_layers + 1, sizeof *ids);
  _cleanup_free_ st_oci_desc *layers = calloc(img->n_layers + 1, sizeof *layers);
  if (!ids || !layers)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < img->n_layers; i++) {
    ids[i] = infos[i].diff_id;
    layers[i] = (st_oci_desc){.media_type = (char *)st_oci_layer_media_type(c),
                              .digest = infos[i].digest, .size = infos[i].size};
  }
  _cleanup_free_ char *cfg = NULL;
  size_t cfg_len;
  int rc = st_oci_config_json(img, ids, &cfg, &cfg_len, err);
  if (rc < 0)
    return rc;
  st_oci_desc cd = {.media_type = (char *)ST_OCI_MT_CONFIG, .size = cfg_len};
  st_sha256(&cd.digest, cfg, cfg_len);
  if ((rc = st_oci_manifest_json(&cd, layers, img->n_layers, manifest_json, manifest_len, err)) < 0)
    return rc;
  *config_json = ST_TAKE_PTR(cfg);
  *config_len = cfg_len;
  return ST_OK;
}

/* ---- the layout ---- */

static int write_oci_layout(int dirfd, const char *dir, st_error *err) {
  static const char text[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
  if (faccessat(dirfd, "oci-layout", F_OK, 0) == 0)
    return ST_OK;
  int rc = st_write_file_atomic(dirfd, "oci-layout", text, sizeof text - 1, 0644, err);
  return rc < 0 ? st_error_prefix(err, "OCI layout %s", dir) : ST_OK;
}

/* Which layers need a blob: those not known from an earlier publish with
 * their blob present in blobs. */
static void layers_wanted(st_store *s, const st_image *img, st_oci_compression c,
                          const char *blobs, bool *want, st_oci_blob_info *infos) {
  for (size_t i = 0; i < img->n_layers; i++) {
    want[i] = true;
    if (!st_oci_cache_get(s, &img->layers[i].digest, c, &infos[i]))
      continue;
    char hex[ST_DIGEST_HEX_LEN + 1], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", blobs, st_digest_hex(&infos[i].digest, hex));
    struct stat st;
    want[i] = stat(path, &st) < 0 || (uint64_t)st.st_size != infos[i].size;
  }
}

int st_oci_publish_layout(st_store *s, const st_image *img, const char *dir, const char *tag,
                          const st_oci_publish_opts *o, st_oci_publish_result *res,
                          st_error *err) {
  char blobs[PATH_MAX];
  snprintf(blobs, sizeof blobs, "%s/blobs/sha256", dir);
  int rc = st_mkdir_p(AT_FDCWD, blobs, 0755, err);
  if (rc < 0)
    return st_error_prefix(err, "OCI layout %s", dir);
  _cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return st_error_errno(err, errno, "OCI layout %s", dir);
  /* a present index.json must be one we can extend, before any work */
  _cleanup_free_ uint8_t *old = NULL;
  size_t old_len = 0;
  if (faccessat(dirfd, "index.json", F_OK, 0) == 0 &&
      (rc = st_read_file_at(dirfd, "index.json", ST_OCI_JSON_MAX, &old, &old_len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s", dir);
  if (old) {
    _cleanup_(st_oci_index_freep) st_oci_index *check = NULL;
    if ((rc = st_oci_index_parse(&check, old, old_len, err)) < 0)
      return st_error_prefix(err, "OCI layout %s: index.json", dir);
  }
  if ((rc = write_oci_layout(dirfd, dir, err)) < 0)
    return rc;
  _cleanup_free_ st_oci_blob_info *infos = calloc(img->n_layers + 1, sizeof *infos);
  _cleanup_free_ bool *want = calloc(img->n_layers + 1, sizeof *want);
  if (!infos || !want)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  layers_wanted(s, img, o->compression, blobs, want, infos);
  if ((rc = st_oci_make_layers(s, img, want, o->compression, blobs, o->threads, o->progress,
                               infos, err)) < 0)
    return rc;
  _cleanup_free_ char *cfg = NULL, *man = NULL, *index = NULL;
  size_t cfg_len, man_len, index_len;
  if ((rc = st_oci_image_docs(img, infos, o->compression, &cfg, &cfg_len, &man, &man_len, err)) < 0)
    return rc;
  st_oci_desc md = {.media_type = (char *)ST_OCI_MT_MANIFEST, .size = man_len,
                    .ref_name = (char *)tag};
  if ((rc = st_oci_write_blob(blobs, cfg, cfg_len, NULL, err)) < 0 ||
      (rc = st_oci_write_blob(blobs, man, man_len, &md.digest, err)) < 0)
    return rc;
  if ((rc = st_oci_index_json(old, old_len, &md, &index, &index_len, err)) < 0)
    return st_error_prefix(err, "OCI layout %s: index.json", dir);
  /* blobs durable before the index that names them */
  if (syncfs(dirfd) < 0)
    return st_error_errno(err, errno, "sync %s", dir);
  if ((rc = st_write_file_atomic(dirfd, "index.json", index, index_len, 0644, err)) < 0)
    return st_error_prefix(err, "OCI layout %s", dir);
  *res = (st_oci_publish_result){.manifest = md.digest, .manifest_size = man_len,
                                 .layers = img->n_layers};
  for (size_t i = 0; i < img->n_layers; i++) {
    res->layers_made += want[i];
    res->bytes_total += infos[i].size;
  }
  return ST_OK;
}
