/* SPDX-License-Identifier: Apache-2.0 */
/* libostree adapter for the node (docs/NODE.md):
 *
 *   layer:  index + cached chunks --write_files (pool)--> content objects
 *           --build_tree--> OstreeMutableTree --write_mtree/commit--> ref
 *   image:  layer commits --merge_dirtree (whiteouts first)--> mtree --> ref
 *
 * GLib stays in this file; gerr_to_st() is the edge. */
#include "ostree-repo.h"

#include <errno.h>
#include <fcntl.h>
#include <ostree.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "filemap.h"
#include "layer-index.h"
#include "log.h"
#include "pool.h"
#include "unpack.h"

ST_DEFINE_FREEP(st_pool, st_pool_free)

#define LAYER_REF "strata/layer/"
#define IMAGE_REF "strata/image/"
#define META_WHITEOUTS "strata.whiteouts"
#define META_OPAQUE "strata.opaque"

struct st_ostree {
  OstreeRepo *repo;
  bool user_mode;
  char *files_path;  /* <repo>.files */
  st_filemap *files; /* file identity -> content object; loaded by the first layer write */
};

/* The edge: a GError becomes an st_error with the closest code. */
static int gerr_to_st(st_error *err, GError *gerr, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int gerr_to_st(st_error *err, GError *gerr, const char *fmt, ...) {
  int code = ST_EIO;
  const char *msg = gerr ? gerr->message : "unknown error";
  if (gerr && gerr->domain == G_IO_ERROR) {
    switch (gerr->code) {
    case G_IO_ERROR_NO_SPACE: code = ST_ENOSPC; break;
    case G_IO_ERROR_NOT_FOUND: code = ST_ENOENT; break;
    case G_IO_ERROR_PERMISSION_DENIED: code = ST_EPERM; break;
    case G_IO_ERROR_EXISTS: code = ST_EEXIST; break;
    default: break;
    }
  }
  if (strstr(msg, "min-free-space") || strstr(msg, "No space left"))
    code = ST_ENOSPC;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  return st_error_set(err, code, "%s: %s%s", prefix, msg,
                      code == ST_ENOSPC && !strstr(msg, "No space") ? " (disk full)" : "");
}

static void ref_name(char *buf, size_t len, const char *prefix, const st_digest *d) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  snprintf(buf, len, "%s%s", prefix, st_digest_hex(d, hex));
}

int st_ostree_open(st_ostree **out, const char *path, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  g_autoptr(OstreeRepo) repo = NULL;
  struct stat st;
  if (stat(path, &st) == 0) {
    repo = ostree_repo_open_at(AT_FDCWD, path, NULL, &gerr);
  } else {
    /* Created aside and renamed into place: a repo is complete or absent. */
    OstreeRepoMode mode = geteuid() == 0 ? OSTREE_REPO_MODE_BARE : OSTREE_REPO_MODE_BARE_USER_ONLY;
    g_autofree char *tmp = g_strdup_printf("%s.tmp-%ld", path, (long)getpid());
    g_autoptr(OstreeRepo) fresh = ostree_repo_create_at(AT_FDCWD, tmp, mode, NULL, NULL, &gerr);
    if (!fresh)
      return gerr_to_st(err, gerr, "node repo %s", path);
    g_clear_object(&fresh);
    if (rename(tmp, path) < 0 && errno != EEXIST && errno != ENOTEMPTY)
      return st_error_errno(err, errno, "node repo %s", path);
    st_remove_tree(AT_FDCWD, tmp, NULL); /* lost a race: use the other one */
    repo = ostree_repo_open_at(AT_FDCWD, path, NULL, &gerr);
  }
  if (!repo)
    return gerr_to_st(err, gerr, "node repo %s", path);
  OstreeRepoMode mode = ostree_repo_get_mode(repo);
  if (mode != OSTREE_REPO_MODE_BARE && mode != OSTREE_REPO_MODE_BARE_USER_ONLY)
    return st_error_set(err, ST_EFORMAT, "node repo %s: mode is neither bare nor bare-user-only",
                        path);
  if (mode == OSTREE_REPO_MODE_BARE && geteuid() != 0)
    return st_error_set(err, ST_EPERM, "node repo %s: a bare repo is written as root only", path);
  st_ostree *r = calloc(1, sizeof *r);
  if (!r)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  r->repo = g_steal_pointer(&repo);
  r->user_mode = mode == OSTREE_REPO_MODE_BARE_USER_ONLY;
  if (asprintf(&r->files_path, "%s.files", path) < 0) {
    r->files_path = NULL;
    st_ostree_free(r);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  *out = r;
  return ST_OK;
}

void st_ostree_free(st_ostree *r) {
  if (!r)
    return;
  g_clear_object(&r->repo);
  st_filemap_free(r->files);
  free(r->files_path);
  free(r);
}

bool st_ostree_user_mode(const st_ostree *r) { return r->user_mode; }

/* The commit a ref points at (NULL when the ref does not exist). */
static int resolve(st_ostree *r, const char *ref, char **commit_out, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  char *rev = NULL;
  if (!ostree_repo_resolve_rev_ext(r->repo, ref, TRUE, 0, &rev, &gerr))
    return gerr_to_st(err, gerr, "ref %s", ref);
  *commit_out = rev;
  return rev ? 1 : 0;
}

/* The commit of a layer or image ref; ST_ENOENT "<what> sha256:<hex> is not
 * committed" when there is none. */
static int committed(st_ostree *r, const char *prefix, const st_digest *d, const char *what,
                     char **rev_out, st_error *err) {
  char ref[128], hex[ST_DIGEST_HEX_LEN + 1];
  ref_name(ref, sizeof ref, prefix, d);
  int rc = resolve(r, ref, rev_out, err);
  if (rc == 0)
    return st_error_set(err, ST_ENOENT, "%s sha256:%s is not committed", what,
                        st_digest_hex(d, hex));
  return rc < 0 ? rc : ST_OK;
}

static int has_ref(st_ostree *r, const char *prefix, const st_digest *d, st_error *err) {
  char ref[128];
  ref_name(ref, sizeof ref, prefix, d);
  g_autofree char *rev = NULL;
  return resolve(r, ref, &rev, err);
}

int st_ostree_has_layer(st_ostree *r, const st_digest *layer, st_error *err) {
  return has_ref(r, LAYER_REF, layer, err);
}

int st_ostree_has_image(st_ostree *r, const st_digest *image, st_error *err) {
  return has_ref(r, IMAGE_REF, image, err);
}

/* ---- writing a layer ------------------------------------------------------ */

typedef struct {
  st_ostree *r;
  st_store *cache;
  const st_layer_index *idx;
  char **csums; /* per entry: content checksum (regular files, symlinks) */
  st_digest *keys; /* per regular file: its identity in the file map */
  bool *written;   /* per regular file: written now (not reused) */
  pthread_mutex_t lock;
  st_error err;
  bool failed;
  uint64_t bytes, files_reused, bytes_reused;
} layer_job;

typedef struct {
  layer_job *j;
  size_t i;
} file_task;

static GVariant *xattrs_variant(st_ostree *r, const st_entry *e) {
  GVariantBuilder b;
  g_variant_builder_init(&b, G_VARIANT_TYPE("a(ayay)"));
  if (!r->user_mode)
    for (size_t k = 0; k < e->n_xattrs; k++)
      g_variant_builder_add(&b, "(@ay@ay)", g_variant_new_bytestring(e->xattrs[k].name),
                            g_variant_new_fixed_array(G_VARIANT_TYPE_BYTE, e->xattrs[k].value,
                                                      e->xattrs[k].len, 1));
  return g_variant_ref_sink(g_variant_builder_end(&b));
}

/* bare-user-only keeps no ownership and refuses set-id, sticky and
 * world-writable bits. */
static void entry_owner_mode(st_ostree *r, const st_entry *e, guint32 *uid, guint32 *gid,
                             guint32 *mode) {
  *uid = r->user_mode ? 0 : e->uid;
  *gid = r->user_mode ? 0 : e->gid;
  *mode = r->user_mode ? (e->mode & 0775) : (e->mode & 07777);
}

/* A regular file's identity as the repo stores it: owner, mode and xattrs as
 * written, size, and the chunk list (which fixes the content). */
static int file_key(st_ostree *r, const st_entry *e, st_digest *out) {
  st_hasher *h = st_hasher_new();
  if (!h)
    return ST_ENOMEM;
  guint32 v[3];
  entry_owner_mode(r, e, &v[0], &v[1], &v[2]);
  st_hasher_update(h, "strata-file-1", 13);
  st_hasher_update(h, v, sizeof v);
  st_hasher_update(h, &e->size, sizeof e->size);
  uint64_t nx = r->user_mode ? 0 : e->n_xattrs;
  st_hasher_update(h, &nx, sizeof nx);
  for (size_t k = 0; k < nx; k++) {
    uint64_t len = e->xattrs[k].len;
    st_hasher_update(h, e->xattrs[k].name, strlen(e->xattrs[k].name) + 1);
    st_hasher_update(h, &len, sizeof len);
    st_hasher_update(h, e->xattrs[k].value, e->xattrs[k].len);
  }
  for (size_t k = 0; k < e->n_chunks; k++)
    st_hasher_update(h, e->chunks[k].digest.bytes, ST_DIGEST_LEN);
  st_hasher_final(h, out);
  st_hasher_free(h);
  return ST_OK;
}

/* The content object of a file the repo already has (by the file map), or
 * NULL. */
static char *known_object(st_ostree *r, const st_digest *key) {
  const uint8_t *raw = st_filemap_get(r->files, key);
  if (!raw)
    return NULL;
  char *csum = ostree_checksum_from_bytes(raw);
  gboolean have = FALSE;
  if (!ostree_repo_has_object(r->repo, OSTREE_OBJECT_TYPE_FILE, csum, &have, NULL, NULL))
    have = FALSE; /* then the file is simply written */
  if (!have)
    g_free(g_steal_pointer(&csum));
  return csum;
}

static int write_regular(layer_job *j, size_t i, const st_entry *e, char **csum_out,
                         st_error *err) {
  if (file_key(j->r, e, &j->keys[i]) < 0)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  if ((*csum_out = known_object(j->r, &j->keys[i])))
    return ST_OK;
  j->written[i] = true;
  g_autoptr(GError) gerr = NULL;
  guint32 uid, gid, mode;
  entry_owner_mode(j->r, e, &uid, &gid, &mode);
  g_autoptr(GVariant) xattrs = xattrs_variant(j->r, e);
  g_autoptr(OstreeContentWriter) w =
      ostree_repo_write_regfile(j->r->repo, NULL, uid, gid, S_IFREG | mode, e->size, xattrs, &gerr);
  if (!w)
    return gerr_to_st(err, gerr, "/%s", e->path);
  for (size_t k = 0; k < e->n_chunks; k++) {
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = st_store_get(j->cache, ST_KIND_CHUNK, &e->chunks[k].digest, &data, &len, err);
    if (rc < 0)
      return st_error_prefix(err, "/%s", e->path);
    gboolean ok = g_output_stream_write_all(G_OUTPUT_STREAM(w), data, len, NULL, NULL, &gerr);
    free(data);
    if (!ok)
      return gerr_to_st(err, gerr, "/%s", e->path);
  }
  char *csum = ostree_content_writer_finish(w, NULL, &gerr);
  if (!csum)
    return gerr_to_st(err, gerr, "/%s", e->path);
  *csum_out = csum;
  return ST_OK;
}

static void file_task_run(void *arg) {
  file_task *t = arg;
  layer_job *j = t->j;
  pthread_mutex_lock(&j->lock);
  bool skip = j->failed;
  pthread_mutex_unlock(&j->lock);
  if (skip)
    return;
  const st_entry *e = st_layer_index_entry(j->idx, t->i);
  st_error err = {0};
  char *csum = NULL;
  int rc = write_regular(j, t->i, e, &csum, &err);
  pthread_mutex_lock(&j->lock);
  if (rc < 0 && !j->failed) {
    j->failed = true;
    j->err = err;
  }
  if (rc == ST_OK) {
    j->csums[t->i] = csum;
    if (j->written[t->i])
      j->bytes += e->size;
    else {
      j->files_reused++;
      j->bytes_reused += e->size;
    }
  }
  pthread_mutex_unlock(&j->lock);
}

/* Regular files in parallel, symlinks inline. */
static int write_files(layer_job *j, unsigned threads, st_error *err) {
  size_t n = st_layer_index_count(j->idx);
  _cleanup_free_ file_task *tasks = calloc(n + 1, sizeof *tasks);
  if (!tasks)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  _cleanup_(st_pool_freep) st_pool *pool = NULL;
  int rc = st_pool_new(&pool, threads, 0, err);
  if (rc < 0)
    return rc;
  for (size_t i = 0; i < n; i++) {
    const st_entry *e = st_layer_index_entry(j->idx, i);
    if (e->type == ST_ENTRY_REGULAR) {
      tasks[i] = (file_task){j, i};
      st_pool_submit(pool, file_task_run, &tasks[i]);
    } else if (e->type == ST_ENTRY_SYMLINK) {
      g_autoptr(GError) gerr = NULL;
      guint32 uid, gid, mode;
      entry_owner_mode(j->r, e, &uid, &gid, &mode);
      g_autoptr(GVariant) xattrs = xattrs_variant(j->r, e);
      char *csum = ostree_repo_write_symlink(j->r->repo, NULL, uid, gid, xattrs, e->target, NULL,
                                             &gerr);
      if (!csum) {
        st_pool_wait(pool);
        return gerr_to_st(err, gerr, "/%s", e->path);
      }
      j->csums[i] = csum;
    }
  }
  st_pool_wait(pool);
  if (j->failed) {
    *err = j->err;
    return err->code;
  }
  return ST_OK;
}

static int write_dirmeta(st_ostree *r, const st_entry *e, char **csum_out, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  guint32 uid, gid, mode;
  entry_owner_mode(r, e, &uid, &gid, &mode);
  if (r->user_mode)
    mode = (e->mode & 0775) | 0700; /* the owner must be able to enter and clean up */
  g_autoptr(GFileInfo) info = g_file_info_new();
  g_file_info_set_attribute_uint32(info, "unix::uid", uid);
  g_file_info_set_attribute_uint32(info, "unix::gid", gid);
  g_file_info_set_attribute_uint32(info, "unix::mode", S_IFDIR | mode);
  g_autoptr(GVariant) xattrs = xattrs_variant(r, e);
  g_autoptr(GVariant) meta = ostree_create_directory_metadata(info, xattrs);
  g_autofree guchar *raw = NULL;
  if (!ostree_repo_write_metadata(r->repo, OSTREE_OBJECT_TYPE_DIR_META, NULL, meta, &raw, NULL,
                                  &gerr))
    return gerr_to_st(err, gerr, "/%s", e->path);
  *csum_out = ostree_checksum_from_bytes(raw);
  return ST_OK;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The directory tree of the layer; whiteouts and opaque dirs go to the
 * builders (commit metadata). */
static int build_tree(layer_job *j, OstreeMutableTree *root, GVariantBuilder *whiteouts,
                      GVariantBuilder *opaque, st_error *err) {
  g_autoptr(GHashTable) dirs = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_object_unref);
  g_autoptr(GHashTable) files = g_hash_table_new(g_str_hash, g_str_equal);
  size_t n = st_layer_index_count(j->idx);
  g_autoptr(GError) gerr = NULL;
  for (size_t i = 0; i < n; i++) {
    const st_entry *e = st_layer_index_entry(j->idx, i);
    if (e->path[0] == '\0') {
      g_autofree char *meta = NULL;
      int rc = write_dirmeta(j->r, e, &meta, err);
      if (rc < 0)
        return rc;
      ostree_mutable_tree_set_metadata_checksum(root, meta);
      g_hash_table_insert(dirs, (char *)e->path, g_object_ref(root));
      continue;
    }
    const char *name = base_name(e->path);
    g_autofree char *parent_path = g_strndup(e->path, name == e->path ? 0 : name - e->path - 1);
    OstreeMutableTree *parent = g_hash_table_lookup(dirs, parent_path);
    if (!parent)
      return st_error_set(err, ST_EFORMAT, "layer entry /%s: parent is not a directory", e->path);
    const char *csum = NULL;
    switch (e->type) {
    case ST_ENTRY_DIR: {
      g_autofree char *meta = NULL;
      int rc = write_dirmeta(j->r, e, &meta, err);
      if (rc < 0)
        return rc;
      OstreeMutableTree *sub = NULL;
      if (!ostree_mutable_tree_ensure_dir(parent, name, &sub, &gerr))
        return gerr_to_st(err, gerr, "/%s", e->path);
      ostree_mutable_tree_set_metadata_checksum(sub, meta);
      g_hash_table_insert(dirs, (char *)e->path, sub);
      if (e->opaque)
        g_variant_builder_add(opaque, "s", e->path);
      continue;
    }
    case ST_ENTRY_WHITEOUT:
      g_variant_builder_add(whiteouts, "s", e->path);
      continue;
    case ST_ENTRY_HARDLINK:
      csum = g_hash_table_lookup(files, e->target);
      if (!csum)
        return st_error_set(err, ST_EFORMAT, "layer entry /%s: hardlink target /%s unknown",
                            e->path, e->target);
      break;
    default:
      csum = j->csums[i];
      g_hash_table_insert(files, (char *)e->path, (char *)csum);
      break;
    }
    if (!ostree_mutable_tree_replace_file(parent, name, csum, &gerr))
      return gerr_to_st(err, gerr, "/%s", e->path);
  }
  return ST_OK;
}

static int commit_tree(st_ostree *r, OstreeMutableTree *mt, const char *subject, GVariant *meta,
                       const char *ref, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  g_autoptr(GFile) root = NULL;
  g_autofree char *commit = NULL;
  if (!ostree_repo_write_mtree(r->repo, mt, &root, NULL, &gerr) ||
      !ostree_repo_write_commit_with_time(r->repo, NULL, subject, NULL, meta,
                                          OSTREE_REPO_FILE(root), 0, &commit, NULL, &gerr))
    return gerr_to_st(err, gerr, "%s", subject);
  ostree_repo_transaction_set_ref(r->repo, NULL, ref, commit);
  if (!ostree_repo_commit_transaction(r->repo, NULL, NULL, &gerr))
    return gerr_to_st(err, gerr, "%s", subject);
  return ST_OK;
}

static int begin(st_ostree *r, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  if (!ostree_repo_prepare_transaction(r->repo, NULL, NULL, &gerr))
    return gerr_to_st(err, gerr, "node repo: transaction");
  return ST_OK;
}

static void abort_tx(st_ostree *r) {
  (void)ostree_repo_abort_transaction(r->repo, NULL, NULL);
}

/* After the layer's commit: the files written now go into the file map.
 * The map only saves work, so a failure to extend it is a warning. */
static void remember_files(st_ostree *r, layer_job *j, size_t n) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    m += j->written[i];
  st_digest *keys = calloc(m + 1, sizeof *keys);
  uint8_t(*csums)[32] = calloc(m + 1, sizeof *csums);
  st_error err = {0};
  if (!keys || !csums)
    st_error_set(&err, ST_ENOMEM, "out of memory");
  for (size_t i = 0, k = 0; keys && csums && i < n; i++)
    if (j->written[i]) {
      keys[k] = j->keys[i];
      ostree_checksum_inplace_to_bytes(j->csums[i], csums[k++]);
    }
  if (err.code == ST_OK)
    st_filemap_add(r->files, keys, (const uint8_t(*)[32])csums, m, &err);
  if (err.code < 0)
    st_warn("node file map: %s (unchanged files of later layers are written again)", err.msg);
  free(keys);
  free(csums);
}

int st_ostree_write_layer(st_ostree *r, st_store *cache, const st_digest *layer, unsigned threads,
                          st_ostree_layer_stats *stats, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], ref[128], subject[128];
  st_digest_hex(layer, hex);
  snprintf(ref, sizeof ref, LAYER_REF "%s", hex);
  snprintf(subject, sizeof subject, "layer sha256:%s", hex);
  _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
  int rc = st_layer_index_load(&idx, cache, layer, err);
  if (rc == ST_OK && !r->files)
    rc = st_filemap_open(&r->files, r->files_path, err);
  if (rc < 0)
    return rc;
  size_t n = st_layer_index_count(idx);
  layer_job j = {.r = r, .cache = cache, .idx = idx, .lock = PTHREAD_MUTEX_INITIALIZER};
  j.csums = calloc(n + 1, sizeof *j.csums);
  j.keys = calloc(n + 1, sizeof *j.keys);
  j.written = calloc(n + 1, sizeof *j.written);
  if (!j.csums || !j.keys || !j.written) {
    free(j.csums);
    free(j.keys);
    free(j.written);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  if ((rc = begin(r, err)) < 0)
    goto out;
  if ((rc = write_files(&j, threads, err)) < 0)
    goto fail;
  {
    g_autoptr(OstreeMutableTree) mt = ostree_mutable_tree_new();
    GVariantBuilder wh, op, meta;
    g_variant_builder_init(&wh, G_VARIANT_TYPE("as"));
    g_variant_builder_init(&op, G_VARIANT_TYPE("as"));
    rc = build_tree(&j, mt, &wh, &op, err);
    g_variant_builder_init(&meta, G_VARIANT_TYPE("a{sv}"));
    g_variant_builder_add(&meta, "{sv}", META_WHITEOUTS, g_variant_builder_end(&wh));
    g_variant_builder_add(&meta, "{sv}", META_OPAQUE, g_variant_builder_end(&op));
    g_autoptr(GVariant) md = g_variant_ref_sink(g_variant_builder_end(&meta));
    if (rc < 0)
      goto fail;
    if ((rc = commit_tree(r, mt, subject, md, ref, err)) < 0)
      goto fail;
  }
  remember_files(r, &j, n);
  if (stats) {
    stats->files += n;
    stats->bytes += j.bytes;
    stats->files_reused += j.files_reused;
    stats->bytes_reused += j.bytes_reused;
  }
  goto out;
fail:
  abort_tx(r);
  st_error_prefix(err, "layer sha256:%s", hex);
out:
  for (size_t i = 0; i < n; i++)
    g_free(j.csums[i]);
  free(j.csums);
  free(j.keys);
  free(j.written);
  pthread_mutex_destroy(&j.lock);
  return rc;
}

/* ---- composing an image --------------------------------------------------- */

typedef struct {
  char *contents, *meta; /* root dirtree and dirmeta checksums */
  GVariant *whiteouts, *opaque;
} layer_commit;

static void layer_commit_clear(layer_commit *c) {
  g_free(c->contents);
  g_free(c->meta);
  if (c->whiteouts)
    g_variant_unref(c->whiteouts);
  if (c->opaque)
    g_variant_unref(c->opaque);
}

static int load_layer_commit(st_ostree *r, const st_digest *layer, layer_commit *out,
                             st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  g_autofree char *rev = NULL;
  int rc = committed(r, LAYER_REF, layer, "layer", &rev, err);
  if (rc < 0)
    return rc;
  g_autoptr(GError) gerr = NULL;
  g_autoptr(GVariant) commit = NULL;
  if (!ostree_repo_load_commit(r->repo, rev, &commit, NULL, &gerr))
    return gerr_to_st(err, gerr, "layer sha256:%s", st_digest_hex(layer, hex));
  g_autoptr(GVariant) md = g_variant_get_child_value(commit, 0);
  g_autoptr(GVariant) contents = g_variant_get_child_value(commit, 6);
  g_autoptr(GVariant) meta = g_variant_get_child_value(commit, 7);
  out->contents = ostree_checksum_from_bytes_v(contents);
  out->meta = ostree_checksum_from_bytes_v(meta);
  out->whiteouts = g_variant_lookup_value(md, META_WHITEOUTS, G_VARIANT_TYPE("as"));
  out->opaque = g_variant_lookup_value(md, META_OPAQUE, G_VARIANT_TYPE("as"));
  return ST_OK;
}

/* Removes path (and what is below it) from the tree, if present. */
static int remove_path(OstreeMutableTree *root, const char *path, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  g_auto(GStrv) parts = g_strsplit(path, "/", -1);
  OstreeMutableTree *dir = root;
  guint n = g_strv_length(parts);
  for (guint i = 0; i + 1 < n; i++) {
    g_autofree char *file = NULL;
    g_autoptr(OstreeMutableTree) sub = NULL;
    if (!ostree_mutable_tree_lookup(dir, parts[i], &file, &sub, &gerr)) {
      if (g_error_matches(gerr, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
        return ST_OK;
      return gerr_to_st(err, gerr, "whiteout /%s", path);
    }
    if (!sub)
      return ST_OK;
    dir = sub; /* still owned by its parent */
  }
  if (!ostree_mutable_tree_remove(dir, parts[n - 1], TRUE, &gerr))
    return gerr_to_st(err, gerr, "whiteout /%s", path);
  return ST_OK;
}

/* Merges an upper dirtree into mt: files replace, directories recurse,
 * a directory new to mt is taken over whole (lazily). */
static int merge_dirtree(OstreeRepo *repo, OstreeMutableTree *mt, const char *contents,
                         const char *meta, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  g_autoptr(GVariant) tree = NULL;
  if (!ostree_repo_load_variant(repo, OSTREE_OBJECT_TYPE_DIR_TREE, contents, &tree, &gerr))
    return gerr_to_st(err, gerr, "dirtree %s", contents);
  ostree_mutable_tree_set_metadata_checksum(mt, meta);
  g_autoptr(GVariant) files = g_variant_get_child_value(tree, 0);
  g_autoptr(GVariant) dirs = g_variant_get_child_value(tree, 1);
  GVariantIter it;
  const char *name;
  GVariant *csum_v, *meta_v;
  g_variant_iter_init(&it, files);
  while (g_variant_iter_loop(&it, "(&s@ay)", &name, &csum_v)) {
    g_autofree char *csum = ostree_checksum_from_bytes_v(csum_v);
    if (!ostree_mutable_tree_remove(mt, name, TRUE, &gerr) ||
        !ostree_mutable_tree_replace_file(mt, name, csum, &gerr))
      return gerr_to_st(err, gerr, "merge %s", name);
  }
  g_variant_iter_init(&it, dirs);
  while (g_variant_iter_loop(&it, "(&s@ay@ay)", &name, &csum_v, &meta_v)) {
    g_autofree char *sub_contents = ostree_checksum_from_bytes_v(csum_v);
    g_autofree char *sub_meta = ostree_checksum_from_bytes_v(meta_v);
    g_autofree char *file = NULL;
    g_autoptr(OstreeMutableTree) sub = NULL;
    if (!ostree_mutable_tree_lookup(mt, name, &file, &sub, &gerr)) {
      if (!g_error_matches(gerr, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
        return gerr_to_st(err, gerr, "merge %s", name);
      g_clear_error(&gerr);
    }
    if (sub) {
      int rc = merge_dirtree(repo, sub, sub_contents, sub_meta, err);
      if (rc < 0)
        return rc;
      continue;
    }
    if (file && !ostree_mutable_tree_remove(mt, name, FALSE, &gerr))
      return gerr_to_st(err, gerr, "merge %s", name);
    if (!ostree_mutable_tree_ensure_dir(mt, name, &sub, &gerr))
      return gerr_to_st(err, gerr, "merge %s", name);
    if (!ostree_mutable_tree_fill_empty_from_dirtree(sub, repo, sub_contents, sub_meta))
      return st_error_set(err, ST_EIO, "merge %s: cannot fill from dirtree %s", name,
                          sub_contents);
  }
  return ST_OK;
}

static int apply_paths(OstreeMutableTree *mt, GVariant *paths, st_error *err) {
  if (!paths)
    return ST_OK;
  GVariantIter it;
  const char *p;
  g_variant_iter_init(&it, paths);
  while (g_variant_iter_next(&it, "&s", &p)) {
    int rc = remove_path(mt, p, err);
    if (rc < 0)
      return rc;
  }
  return ST_OK;
}

static int compose(st_ostree *r, OstreeMutableTree *mt, const st_digest *layers, size_t n,
                   st_error *err) {
  for (size_t i = 0; i < n; i++) {
    layer_commit lc = {0};
    int rc = load_layer_commit(r, &layers[i], &lc, err);
    if (rc == ST_OK && i == 0) {
      if (!ostree_mutable_tree_fill_empty_from_dirtree(mt, r->repo, lc.contents, lc.meta))
        rc = st_error_set(err, ST_EIO, "dirtree %s: cannot fill", lc.contents);
    } else if (rc == ST_OK) {
      if ((rc = apply_paths(mt, lc.whiteouts, err)) == ST_OK &&
          (rc = apply_paths(mt, lc.opaque, err)) == ST_OK)
        rc = merge_dirtree(r->repo, mt, lc.contents, lc.meta, err);
    }
    layer_commit_clear(&lc);
    if (rc < 0)
      return rc;
  }
  return ST_OK;
}

int st_ostree_write_image(st_ostree *r, const st_digest *image, const st_digest *layers,
                          size_t n_layers, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], ref[128], subject[128];
  st_digest_hex(image, hex);
  snprintf(ref, sizeof ref, IMAGE_REF "%s", hex);
  snprintf(subject, sizeof subject, "image sha256:%s", hex);
  if (n_layers == 0)
    return st_error_set(err, ST_EFORMAT, "image sha256:%s has no layers", hex);
  int rc = begin(r, err);
  if (rc < 0)
    return rc;
  g_autoptr(OstreeMutableTree) mt = ostree_mutable_tree_new();
  if ((rc = compose(r, mt, layers, n_layers, err)) < 0 ||
      (rc = commit_tree(r, mt, subject, NULL, ref, err)) < 0) {
    abort_tx(r);
    return st_error_prefix(err, "image sha256:%s", hex);
  }
  return ST_OK;
}

int st_ostree_checkout_image(st_ostree *r, const st_digest *image, int dfd, const char *path,
                             st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  g_autofree char *rev = NULL;
  int rc = committed(r, IMAGE_REF, image, "image", &rev, err);
  if (rc < 0)
    return rc;
  OstreeRepoCheckoutAtOptions opts = {0};
  opts.mode = r->user_mode ? OSTREE_REPO_CHECKOUT_MODE_USER : OSTREE_REPO_CHECKOUT_MODE_NONE;
  opts.overwrite_mode = OSTREE_REPO_CHECKOUT_OVERWRITE_NONE;
  g_autoptr(GError) gerr = NULL;
  if (!ostree_repo_checkout_at(r->repo, &opts, dfd, path, rev, NULL, &gerr))
    return gerr_to_st(err, gerr, "checkout of image sha256:%s", st_digest_hex(image, hex));
  return ST_OK;
}

static int delete_ref(st_ostree *r, const char *prefix, const st_digest *d, st_error *err) {
  char ref[128];
  ref_name(ref, sizeof ref, prefix, d);
  g_autoptr(GError) gerr = NULL;
  if (!ostree_repo_set_ref_immediate(r->repo, NULL, ref, NULL, NULL, &gerr))
    return gerr_to_st(err, gerr, "ref %s", ref);
  return ST_OK;
}

int st_ostree_delete_image(st_ostree *r, const st_digest *image, st_error *err) {
  return delete_ref(r, IMAGE_REF, image, err);
}

int st_ostree_delete_layer(st_ostree *r, const st_digest *layer, st_error *err) {
  return delete_ref(r, LAYER_REF, layer, err);
}

int st_ostree_prune(st_ostree *r, uint64_t *freed_out, st_error *err) {
  g_autoptr(GError) gerr = NULL;
  gint total = 0, pruned = 0;
  guint64 freed = 0;
  if (!ostree_repo_prune(r->repo, OSTREE_REPO_PRUNE_FLAGS_REFS_ONLY, -1, &total, &pruned, &freed,
                         NULL, &gerr))
    return gerr_to_st(err, gerr, "node repo: prune");
  if (freed_out)
    *freed_out = freed;
  return ST_OK;
}

int st_ostree_list(st_ostree *r, bool images, int (*cb)(const st_digest *d, void *ud), void *ud,
                   st_error *err) {
  g_autoptr(GError) gerr = NULL;
  g_autoptr(GHashTable) refs = NULL;
  if (!ostree_repo_list_refs(r->repo, NULL, &refs, NULL, &gerr))
    return gerr_to_st(err, gerr, "node repo: refs");
  const char *prefix = images ? IMAGE_REF : LAYER_REF;
  size_t plen = strlen(prefix);
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init(&it, refs);
  while (g_hash_table_iter_next(&it, &key, NULL)) {
    st_digest d;
    if (strncmp(key, prefix, plen) != 0 || st_digest_parse(&d, (char *)key + plen, NULL) < 0)
      continue;
    int rc = cb(&d, ud);
    if (rc)
      return rc;
  }
  return ST_OK;
}
