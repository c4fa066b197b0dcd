/* SPDX-License-Identifier: Apache-2.0 */
/* Build engine: cache keys, the stat cache of input digests, layer building
 * from sources, dpkg status, run steps and image composition. */
#include "build.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "compose.h"
#include "fs.h"
#include "image.h"
#include "layer-writer.h"
#include "log.h"
#include "run.h"
#include "source.h"
#include "unpack.h"

#define KEY_MAGIC "strata-layer-key 1\n"

struct ctx {
  st_store *s;
  const st_recipe_instance *ri;
  const st_build_opts *o;
  st_digest *layers; /* digests of the layers built or reused so far */
  uint64_t *sizes;
};

static void emit(struct ctx *c, st_build_event *ev) {
  ev->ref = c->ri->ref;
  ev->cell = c->ri->cell_name;
  ev->count = c->ri->n_layers;
  if (c->o->on_event)
    c->o->on_event(ev, c->o->ud);
}

/* ---- input digests and the stat cache ---- */

static bool is_file_like(st_source_kind k) {
  return k == ST_SOURCE_FILE || k == ST_SOURCE_ARCHIVE || k == ST_SOURCE_DEB;
}

static void stat_cache_name(char *buf, size_t len, const char *path) {
  st_digest d;
  char hex[ST_DIGEST_HEX_LEN + 1];
  st_sha256(&d, path, strlen(path));
  st_digest_hex(&d, hex);
  snprintf(buf, len, "inputs/%.2s/%s", hex, hex);
}

static void stat_line(char *buf, size_t len, const struct stat *st) {
  snprintf(buf, len, "%llu %llu %lld %lld.%09ld %lld.%09ld", (unsigned long long)st->st_dev,
           (unsigned long long)st->st_ino, (long long)st->st_size, (long long)st->st_mtim.tv_sec,
           st->st_mtim.tv_nsec, (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
}

/* The digest of a file input if the stat cache knows it for the file as it
 * is now. */
static bool stat_cache_get(st_store *s, const char *path, st_digest *out) {
  struct stat st;
  if (stat(path, &st) < 0)
    return false;
  char name[128], want[160];
  stat_cache_name(name, sizeof name, path);
  stat_line(want, sizeof want, &st);
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  if (st_store_meta_get(s, name, 512, &data, &len, NULL) < 0)
    return false;
  char *sp = strrchr((char *)data, ' ');
  if (!sp || (size_t)(sp - (char *)data) != strlen(want) || memcmp(data, want, strlen(want)))
    return false;
  char *nl = strchr(sp, '\n');
  if (nl)
    *nl = '\0';
  return st_digest_parse(out, sp + 1, NULL) == ST_OK;
}

/* Records d for path, unless the file changed since `before`. */
static void stat_cache_put(st_store *s, const char *path, const struct stat *before,
                           const st_digest *d) {
  struct stat st;
  if (stat(path, &st) < 0 || st.st_mtim.tv_sec != before->st_mtim.tv_sec ||
      st.st_mtim.tv_nsec != before->st_mtim.tv_nsec || st.st_size != before->st_size)
    return;
  char name[128], line[256], hex[ST_DIGEST_HEX_LEN + 1];
  stat_cache_name(name, sizeof name, path);
  stat_line(line, sizeof line, &st);
  size_t n = strlen(line);
  snprintf(line + n, sizeof line - n, " sha256:%s\n", st_digest_hex(d, hex));
  if (st_store_meta_put(s, name, line, strlen(line), NULL) < 0)
    st_debug("could not cache the digest of %s", path);
}

/* Reads a file to hash it (plan mode and cache misses outside a build). */
static int hash_file(st_store *s, const char *path, st_digest *out, st_error *err) {
  struct stat before;
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &before) < 0)
    return st_error_errno(err, errno, "%s", path);
  st_hasher *h = st_hasher_new();
  _cleanup_free_ uint8_t *buf = malloc(1u << 20);
  if (!h || !buf) {
    st_hasher_free(h);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  ssize_t n;
  while ((n = read(fd, buf, 1u << 20)) > 0)
    st_hasher_update(h, buf, (size_t)n);
  int e = errno;
  st_hasher_final(h, out);
  st_hasher_free(h);
  if (n < 0)
    return st_error_errno(err, e, "read %s", path);
  stat_cache_put(s, path, &before, out);
  return ST_OK;
}

struct inputs {
  st_digest *d;
  bool *known;
  size_t n;
};

static size_t count_inputs(const st_recipe_layer *l) {
  size_t n = 0;
  for (size_t i = 0; i < l->n_sources; i++)
    n += l->sources[i].n_paths;
  return n;
}

/* Fills the digests that can be had without reading contents (stat cache,
 * directory stat digests); with `hash`, reads what is missing. */
static int inputs_known(struct ctx *c, const st_recipe_layer *l, struct inputs *in, bool hash,
                        st_error *err) {
  size_t k = 0;
  for (size_t i = 0; i < l->n_sources; i++) {
    const st_recipe_source *src = &l->sources[i];
    for (size_t p = 0; p < src->n_paths; p++, k++) {
      if (src->kind == ST_SOURCE_OCI) { /* the manifest digest names every blob */
        st_oci_config *cfg = NULL;
        int rc = st_source_oci_config(src->paths[p], src->ref, &cfg, &in->d[k], err);
        st_oci_config_free(cfg);
        if (rc < 0)
          return st_error_prefix(err, "%s:%d:%d: layer '%s'", src->recipe_file, src->loc.line,
                                 src->loc.col, l->name);
        in->known[k] = true;
      } else if (c->o->input_digest &&
                 c->o->input_digest(src->paths[p], src->kind, &in->d[k], c->o->input_ud)) {
        in->known[k] = true;
      } else if (!is_file_like(src->kind)) {
        int rc = st_source_dir_digest(src->paths[p], &in->d[k], err);
        if (rc < 0)
          return rc;
        in->known[k] = true;
      } else if (stat_cache_get(c->s, src->paths[p], &in->d[k])) {
        in->known[k] = true;
      } else if (hash) {
        int rc = hash_file(c->s, src->paths[p], &in->d[k], err);
        if (rc < 0)
          return rc;
        in->known[k] = true;
      }
    }
  }
  return ST_OK;
}

static bool all_known(const struct inputs *in) {
  for (size_t i = 0; i < in->n; i++)
    if (!in->known[i])
      return false;
  return true;
}

static int compute_key(struct ctx *c, size_t li, const struct inputs *in, const st_digest *below,
                       st_digest *out, st_error *err) {
  _cleanup_free_ char *canon = st_recipe_layer_canonical(c->ri, li);
  st_hasher *h = st_hasher_new();
  if (!canon || !h) {
    st_hasher_free(h);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  char line[192], hex[ST_DIGEST_HEX_LEN + 1];
  st_hasher_update(h, KEY_MAGIC, strlen(KEY_MAGIC));
  st_hasher_update(h, canon, strlen(canon));
  if (c->o->mtime) { /* SOURCE_DATE_EPOCH changes every entry's mtime */
    int n = snprintf(line, sizeof line, "mtime %lld\n", (long long)c->o->mtime);
    st_hasher_update(h, line, (size_t)n);
  }
  const st_recipe_layer *l = &c->ri->layers[li];
  for (size_t i = 0, k = 0; i < l->n_sources; i++)
    for (size_t p = 0; p < l->sources[i].n_paths; p++, k++) {
      const st_recipe_source *src = &l->sources[i];
      struct stat st;
      int n = snprintf(line, sizeof line, "input sha256:%s", st_digest_hex(&in->d[k], hex));
      /* a file keeps its own mode and owner unless the recipe sets them */
      if (src->kind == ST_SOURCE_FILE && (src->mode < 0 || src->owner_source) &&
          stat(src->paths[p], &st) == 0)
        n += snprintf(line + n, sizeof line - (size_t)n, " mode=%04o owner=%u:%u",
                      (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)st.st_gid);
      line[n++] = '\n';
      st_hasher_update(h, line, (size_t)n);
    }
  int n = below ? snprintf(line, sizeof line, "below sha256:%s\n", st_digest_hex(below, hex))
                : snprintf(line, sizeof line, "below none\n");
  st_hasher_update(h, line, (size_t)n);
  st_hasher_final(h, out);
  st_hasher_free(h);
  return ST_OK;
}

/* ---- building one layer ---- */

static int add_sources(struct ctx *c, st_layer_writer *w, const st_recipe_layer *l,
                       struct inputs *in, char ***controls, size_t *n_controls, st_error *err) {
  size_t k = 0;
  for (size_t i = 0; i < l->n_sources; i++) {
    const st_recipe_source *src = &l->sources[i];
    for (size_t p = 0; p < src->n_paths; p++, k++) {
      st_source_opts so = {
          .dest = src->dest,
          .strip = src->strip,
          .owner = src->owner_source ? ST_OWNER_SOURCE
                                     : (src->uid || src->gid ? ST_OWNER_FIXED : ST_OWNER_ROOT),
          .uid = src->uid,
          .gid = src->gid,
          .mtime = c->o->mtime,
          .has_mode = src->mode >= 0,
          .mode = src->mode >= 0 ? (uint32_t)src->mode : 0,
          .threads = c->o->threads,
      };
      const char *path = src->paths[p];
      struct stat before;
      bool hashing = is_file_like(src->kind) && !in->known[k];
      if (hashing && (stat(path, &before) < 0 || !(so.hasher = st_hasher_new())))
        return st_error_errno(err, errno ? errno : ENOMEM, "%s", path);
      int rc;
      char *control = NULL;
      switch (src->kind) {
      case ST_SOURCE_DIR: rc = st_source_dir(w, path, &so, err); break;
      case ST_SOURCE_FILE: rc = st_source_file(w, path, &so, err); break;
      case ST_SOURCE_ARCHIVE: rc = st_source_archive(w, path, &so, err); break;
      case ST_SOURCE_OCI: rc = st_source_oci(w, c->s, path, src->ref, &so, err); break;
      default: rc = st_source_deb(w, path, &so, &control, err); break;
      }
      if (rc == ST_OK && control) {
        char **nc = realloc(*controls, (*n_controls + 1) * sizeof *nc);
        if (!nc) {
          free(control);
          rc = st_error_set(err, ST_ENOMEM, "out of memory");
        } else {
          *controls = nc;
          nc[(*n_controls)++] = control;
        }
      }
      if (hashing) {
        st_hasher_final(so.hasher, &in->d[k]);
        st_hasher_free(so.hasher);
        if (rc == ST_OK) {
          in->known[k] = true;
          stat_cache_put(c->s, path, &before, &in->d[k]);
        }
      }
      if (rc < 0)
        return st_error_prefix(err, "%s:%d:%d: layer '%s'", src->recipe_file, src->loc.line,
                               src->loc.col, l->name);
    }
  }
  return ST_OK;
}

static int add_deletes(struct ctx *c, st_layer_writer *w, const st_recipe_layer *l,
                       st_error *err) {
  for (size_t i = 0; i < l->n_deletes; i++) {
    const char *p = l->deletes[i];
    while (*p == '/')
      p++;
    st_entry e = {.type = ST_ENTRY_WHITEOUT, .mtime = c->o->mtime};
    if (!*p || !(e.path = strdup(p)))
      return st_error_set(err, *p ? ST_ENOMEM : ST_EINVAL, "layer '%s': cannot delete '/'",
                          l->name);
    int rc = st_layer_writer_add(w, &e, err);
    if (rc < 0)
      return rc;
  }
  return ST_OK;
}

/* Reads the whole content of a regular entry from the store. */
static int read_entry(st_store *s, const st_entry *e, char **out, size_t *len, st_error *err) {
  char *buf = malloc(e->size + 1);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  size_t off = 0;
  for (size_t i = 0; i < e->n_chunks; i++) {
    uint8_t *data = NULL;
    size_t n;
    int rc = st_store_get(s, ST_KIND_CHUNK, &e->chunks[i].digest, &data, &n, err);
    if (rc < 0 || off + n > e->size) {
      free(data);
      free(buf);
      return rc < 0 ? rc : st_error_set(err, ST_ECORRUPT, "/%s: size mismatch", e->path);
    }
    memcpy(buf + off, data, n);
    off += n;
    free(data);
  }
  buf[off] = '\0';
  *out = buf;
  *len = off;
  return ST_OK;
}

#define DPKG_STATUS "var/lib/dpkg/status"

/* Appends each package's control paragraph, marked installed, to the dpkg
 * status of the layers below, and writes the result into this layer. */
static int write_dpkg_status(struct ctx *c, st_layer_writer *w, const st_layer_index *below,
                             char **controls, size_t n, st_error *err) {
  _cleanup_free_ char *lower = NULL;
  size_t lower_len = 0;
  const st_entry *old = below ? st_layer_index_find(below, DPKG_STATUS) : NULL;
  if (old && old->type == ST_ENTRY_REGULAR) {
    int rc = read_entry(c->s, old, &lower, &lower_len, err);
    if (rc < 0)
      return rc;
  }
  st_entry e = {.type = ST_ENTRY_REGULAR, .mode = 0644, .mtime = c->o->mtime};
  if (!(e.path = strdup(DPKG_STATUS)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = st_layer_writer_begin_file(w, &e, err);
  bool any = lower_len > 0;
  if (rc == ST_OK && lower_len)
    rc = st_layer_writer_write(w, lower, lower_len, err);
  if (rc == ST_OK && lower_len && lower[lower_len - 1] != '\n')
    rc = st_layer_writer_write(w, "\n", 1, err);
  for (size_t i = 0; i < n && rc == ST_OK; i++) {
    /* "Package: x\n" first, then the status line, then the rest */
    char *ctl = controls[i];
    char *nl = strchr(ctl, '\n');
    size_t first = nl ? (size_t)(nl - ctl) + 1 : strlen(ctl);
    static const char status[] = "Status: install ok installed\n";
    if (any) /* paragraphs are separated by one blank line */
      rc = st_layer_writer_write(w, "\n", 1, err);
    any = true;
    if (rc == ST_OK)
      rc = st_layer_writer_write(w, ctl, first, err);
    if (rc == ST_OK)
      rc = st_layer_writer_write(w, status, sizeof status - 1, err);
    if (rc == ST_OK)
      rc = st_layer_writer_write(w, ctl + first, strlen(ctl + first), err);
  }
  int rc2 = st_layer_writer_end_file(w, err);
  return rc < 0 ? rc : rc2;
}

/* ---- run steps ---- */

static bool same_entry(const st_entry *a, const st_entry *b) {
  if (a->type != b->type || a->mode != b->mode || a->uid != b->uid || a->gid != b->gid ||
      a->size != b->size || a->n_chunks != b->n_chunks || a->n_xattrs != b->n_xattrs)
    return false;
  if (strcmp(a->target ? a->target : "", b->target ? b->target : ""))
    return false;
  for (size_t i = 0; i < a->n_chunks; i++)
    if (!st_digest_equal(&a->chunks[i].digest, &b->chunks[i].digest))
      return false;
  for (size_t i = 0; i < a->n_xattrs; i++)
    if (strcmp(a->xattrs[i].name, b->xattrs[i].name) || a->xattrs[i].len != b->xattrs[i].len ||
        memcmp(a->xattrs[i].value, b->xattrs[i].value, a->xattrs[i].len))
      return false;
  return true;
}

static int add_copy(st_layer_index *out, const st_entry *e, st_error *err) {
  st_entry c;
  int rc = st_entry_copy(&c, e, err);
  return rc < 0 ? rc : st_layer_index_add(out, &c, err);
}

/* The layer that turns `lower` into `after`: entries of after that are new
 * or differ (with their parent directories as they are in after, and the
 * targets of hardlinks), and whiteouts for the topmost paths that are gone. */
static int delta(const st_layer_index *lower, const st_layer_index *after, int64_t mtime,
                 st_layer_index **out, st_error *err) {
  st_layer_index *d = st_layer_index_new(st_layer_index_chunking(after));
  if (!d)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = ST_OK;
  size_t n = st_layer_index_count(after);
  for (size_t i = 0; i < n && rc == ST_OK; i++) {
    const st_entry *e = st_layer_index_entry(after, i);
    const st_entry *old = st_layer_index_find(lower, e->path);
    if (old && same_entry(old, e))
      continue;
    rc = add_copy(d, e, err);
    if (rc == ST_OK && e->type == ST_ENTRY_HARDLINK) {
      const st_entry *t = st_layer_index_find(after, e->target);
      if (t)
        rc = add_copy(d, t, err);
    }
    /* parents with their real metadata */
    char parent[ST_PATH_MAX + 1];
    snprintf(parent, sizeof parent, "%s", e->path);
    for (char *sl = strrchr(parent, '/'); sl && rc == ST_OK; sl = strrchr(parent, '/')) {
      *sl = '\0';
      const st_entry *pe = st_layer_index_find(after, parent);
      if (pe)
        rc = add_copy(d, pe, err);
    }
  }
  size_t nl = st_layer_index_count(lower);
  for (size_t i = 0; i < nl && rc == ST_OK; i++) {
    const st_entry *e = st_layer_index_entry(lower, i);
    if (!e->path[0] || st_layer_index_find(after, e->path))
      continue;
    const char *sl = strrchr(e->path, '/');
    char parent[ST_PATH_MAX + 1];
    snprintf(parent, sizeof parent, "%.*s", sl ? (int)(sl - e->path) : 0, e->path);
    const st_entry *pe = parent[0] ? st_layer_index_find(after, parent) : NULL;
    if (parent[0] && (!pe || pe->type != ST_ENTRY_DIR))
      continue; /* its parent is gone too, or is no longer a directory (and
                   hides what was below it): one entry covers both */
    st_entry w = {.type = ST_ENTRY_WHITEOUT, .mtime = mtime};
    if (!(w.path = strdup(e->path)))
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
    else
      rc = st_layer_index_add(d, &w, err);
  }
  st_entry root = {.type = ST_ENTRY_DIR, .mode = 0755, .mtime = mtime};
  const st_entry *ar = st_layer_index_find(after, "");
  if (rc == ST_OK)
    rc = st_layer_index_normalize(d, ar ? ar : &root, NULL, err);
  if (rc < 0) {
    st_layer_index_free(d);
    return rc;
  }
  *out = d;
  return ST_OK;
}

static void log_line(const char *line, void *ud) {
  struct ctx *c = ((void **)ud)[0];
  st_build_event ev = {.kind = ST_BUILD_EV_LOG, .layer = ((void **)ud)[1], .line = line};
  emit(c, &ev);
}

/* The scratch directories of one layer's run steps. */
struct run_dirs {
  char root[PATH_MAX], lower[PATH_MAX], upper[PATH_MAX], work[PATH_MAX], merged[PATH_MAX];
};

static int run_dirs_make(struct run_dirs *d, const char *tmpdir, st_error *err) {
  const char *base = tmpdir && *tmpdir ? tmpdir : "/var/tmp";
  if (snprintf(d->root, sizeof d->root, "%s/strata-run-XXXXXX", base) >= (int)sizeof d->root - 8)
    return st_error_set(err, ST_EINVAL, "%s: path too long", base);
  if (!mkdtemp(d->root))
    return st_error_errno(err, errno, "mkdtemp %s", d->root);
  snprintf(d->lower, sizeof d->lower, "%s/lower", d->root);
  snprintf(d->upper, sizeof d->upper, "%s/upper", d->root);
  snprintf(d->work, sizeof d->work, "%s/work", d->root);
  snprintf(d->merged, sizeof d->merged, "%s/merged", d->root);
  return ST_OK;
}

/* Makes upper/work/merged and prepares lower for an overlay run: bwrap's
 * mount points exist in lower, and upper (the root of the merged tree) has
 * the metadata of the composed root. */
static const char *const sandbox_mounts[] = {"proc", "dev", "tmp"};

static int overlay_prepare(const struct run_dirs *d, const st_layer_index *tree, bool *created,
                           st_error *err) {
  const char *dirs[] = {d->upper, d->work, d->merged};
  for (size_t i = 0; i < ST_ARRAY_SIZE(dirs); i++)
    if (mkdir(dirs[i], 0755) < 0)
      return st_error_errno(err, errno, "mkdir %s", dirs[i]);
  for (size_t i = 0; i < ST_ARRAY_SIZE(sandbox_mounts); i++) {
    char p[PATH_MAX + 8];
    snprintf(p, sizeof p, "%s/%s", d->lower, sandbox_mounts[i]);
    struct stat st;
    if (lstat(p, &st) == 0)
      continue;
    if (mkdir(p, 0755) < 0)
      return st_error_errno(err, errno, "mkdir %s", p);
    created[i] = true;
  }
  const st_entry *r = st_layer_index_find(tree, "");
  if (r && (lchown(d->upper, r->uid, r->gid) < 0 || chmod(d->upper, r->mode & 07777) < 0))
    return st_error_errno(err, errno, "%s", d->upper);
  return ST_OK;
}

static bool overlay_wanted(void) {
  const char *v = getenv("STRATA_RUN_OVERLAY");
  return !v || strcmp(v, "0");
}

/* Runs the commands over tree (unpacked in d->lower): with an overlay when
 * it can be mounted, else directly in d->lower. *overlay tells which. */
static int run_commands(struct ctx *c, size_t li, const struct run_dirs *d,
                        const st_layer_index *tree, bool *overlay, st_error *err) {
  const st_recipe_layer *l = &c->ri->layers[li];
  _cleanup_free_ st_kv *env = calloc(c->ri->n_env + 1, sizeof *env);
  if (!env)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < c->ri->n_env; i++)
    env[i] = (st_kv){c->ri->env[i].key, c->ri->env[i].value};
  void *ud[2] = {c, l->name};
  *overlay = false;
  if (overlay_wanted()) {
    bool created[ST_ARRAY_SIZE(sandbox_mounts)] = {false};
    int rc = overlay_prepare(d, tree, created, err);
    if (rc < 0)
      return rc;
    st_run_overlay ov = {d->lower, d->upper, d->work, d->merged};
    rc = st_run_commands_overlay(&ov, l->runs, l->n_runs, env, c->ri->n_env, log_line, ud,
                                 c->o->cancel, err);
    if (rc != ST_EUNSUPPORTED) {
      *overlay = true;
      return rc;
    }
    /* nothing ran: no right to mount here. The tree is packed whole now:
     * the mount points made for the overlay must not end up in it. */
    st_debug("layer '%s': %s; running on the whole tree", l->name, err->msg);
    for (size_t i = 0; i < ST_ARRAY_SIZE(sandbox_mounts); i++) {
      char p[PATH_MAX + 8];
      snprintf(p, sizeof p, "%s/%s", d->lower, sandbox_mounts[i]);
      if (created[i] && rmdir(p) < 0)
        return st_error_errno(err, errno, "rmdir %s", p);
    }
  }
  return st_run_commands(d->lower, l->runs, l->n_runs, env, c->ri->n_env, log_line, ud,
                         c->o->cancel, err);
}

/* Unpacks the layers below plus this layer's sources (in memory, never
 * stored) into a scratch directory, runs the commands there and stores the
 * layer of everything that then differs from the layers below. With an
 * overlay only what the commands changed (its upper directory) is packed;
 * without one, the whole tree. */
static int run_steps(struct ctx *c, size_t li, st_layer_index *below, st_layer_index *sources,
                     st_digest *out, uint64_t *bytes_new, st_error *err) {
  const st_recipe_layer *l = &c->ri->layers[li];
  struct run_dirs d;
  int rc = run_dirs_make(&d, c->o->tmpdir ? c->o->tmpdir : getenv("TMPDIR"), err);
  if (rc < 0)
    return st_error_prefix(err, "layer '%s'", l->name);
  st_layer_index *tree = NULL, *changed = NULL, *after = NULL, *delta_idx = NULL;
  st_layer_index *pair[2] = {below, sources};
  rc = below ? st_compose_indexes(pair, 2, &tree, err) : st_compose_indexes(pair + 1, 1, &tree, err);
  st_unpack_opts uo = st_unpack_opts_default();
  uo.threads = c->o->threads;
  if (rc == ST_OK)
    rc = st_layer_unpack(c->s, tree, d.lower, &uo, NULL, err);
  bool overlay = false;
  if (rc == ST_OK)
    rc = run_commands(c, li, &d, tree, &overlay, err);
  st_layer_writer *w = NULL;
  if (rc == ST_OK)
    rc = st_layer_writer_new(&w, c->s, c->o->threads, err);
  st_pack_opts po = {.mtime = c->o->mtime, .overlay_upper = overlay};
  if (rc == ST_OK)
    rc = st_layer_pack_dir(w, overlay ? d.upper : d.lower, &po, err);
  if (rc == ST_OK)
    rc = st_layer_writer_finish(w, NULL, &changed, err);
  if (rc == ST_OK) /* what the commands wrote adds to what the sources did */
    *bytes_new += st_layer_writer_stats(w)->bytes_new_stored;
  st_layer_writer_free(w);
  st_layer_index *upper[2] = {tree, changed};
  if (rc == ST_OK && overlay)
    rc = st_compose_indexes(upper, 2, &after, err);
  else if (rc == ST_OK)
    after = ST_TAKE_PTR(changed);
  st_layer_index *empty = NULL;
  if (rc == ST_OK && !below && !(below = empty = st_layer_index_new(st_layer_index_chunking(after))))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK)
    rc = delta(below, after, c->o->mtime, &delta_idx, err);
  if (rc == ST_OK)
    rc = st_layer_index_save(c->s, delta_idx, out, err);
  st_layer_index_free(empty);
  st_layer_index_free(tree);
  st_layer_index_free(changed);
  st_layer_index_free(after);
  st_layer_index_free(delta_idx);
  st_remove_tree(AT_FDCWD, d.root, NULL);
  return rc < 0 ? st_error_prefix(err, "layer '%s'", l->name) : ST_OK;
}

static int build_layer(struct ctx *c, size_t li, struct inputs *in, st_digest *out,
                       uint64_t *bytes_new, st_error *err) {
  const st_recipe_layer *l = &c->ri->layers[li];
  st_layer_writer *w = NULL;
  int rc = st_layer_writer_new(&w, c->s, c->o->threads, err);
  if (rc < 0)
    return rc;
  st_layer_writer_set_dir_defaults(w, 0755, 0, 0, c->o->mtime);
  /* The layers below: parents this layer only implies keep their metadata
   * from there, and the dpkg status grows from theirs. */
  st_layer_index *below = NULL;
  if (li > 0)
    rc = st_compose(c->s, c->layers, li, &below, err);
  st_layer_writer_set_lower(w, below);
  char **controls = NULL;
  size_t n_controls = 0;
  if (rc == ST_OK)
    rc = add_sources(c, w, l, in, &controls, &n_controls, err);
  if (rc == ST_OK)
    rc = add_deletes(c, w, l, err);
  if (rc == ST_OK && n_controls)
    rc = write_dpkg_status(c, w, below, controls, n_controls, err);
  for (size_t i = 0; i < n_controls; i++)
    free(controls[i]);
  free(controls);
  /* With run steps the sources alone are not the layer: their index stays
   * in memory (their chunks are stored). */
  st_layer_index *sources = NULL;
  if (rc == ST_OK)
    rc = st_layer_writer_finish(w, l->n_runs ? NULL : out, l->n_runs ? &sources : NULL, err);
  if (rc == ST_OK)
    *bytes_new = st_layer_writer_stats(w)->bytes_new_stored;
  st_layer_writer_free(w);
  if (rc == ST_OK && l->n_runs)
    rc = run_steps(c, li, below, sources, out, bytes_new, err);
  st_layer_index_free(sources);
  st_layer_index_free(below);
  return rc;
}

static int layer_bytes(st_store *s, const st_digest *d, uint64_t *out, st_error *err) {
  st_layer_index *idx = NULL;
  int rc = st_layer_index_load(&idx, s, d, err);
  if (rc == ST_OK)
    *out = st_layer_index_content_bytes(idx);
  st_layer_index_free(idx);
  return rc;
}

/* One layer: reuse it if its key is known and in the store, else build. */
static int do_layer(struct ctx *c, size_t li, st_digest *key, bool *key_known, st_error *err) {
  const st_recipe_layer *l = &c->ri->layers[li];
  size_t n = count_inputs(l);
  struct inputs in = {calloc(n + 1, sizeof *in.d), calloc(n + 1, sizeof *in.known), n};
  if (!in.d || !in.known) {
    free(in.d);
    free(in.known);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  const st_digest *below = li > 0 ? key : NULL;
  bool below_known = li == 0 || *key_known;
  int rc = inputs_known(c, l, &in, c->o->dry_run, err);
  st_build_event ev = {.layer = l->name, .index = li};
  st_digest k = {{0}};
  bool have_key = rc == ST_OK && below_known && all_known(&in);
  if (have_key)
    rc = compute_key(c, li, &in, below, &k, err);
  st_digest found;
  bool cached = have_key && rc == ST_OK && st_build_key_get(c->s, &k, &found, NULL) == ST_OK &&
                st_store_has(c->s, ST_KIND_INDEX, &found, NULL) == 1;
  if (rc == ST_OK && (cached || c->o->dry_run)) {
    ev.kind = c->o->dry_run ? ST_BUILD_EV_PLAN : ST_BUILD_EV_CACHED;
    ev.cached = cached;
    ev.key = k;
    if (cached) {
      c->layers[li] = ev.digest = found;
      rc = layer_bytes(c->s, &found, &c->sizes[li], err);
      ev.bytes = c->sizes[li];
    }
    if (rc == ST_OK)
      emit(c, &ev);
    *key = k;
    *key_known = have_key;
  } else if (rc == ST_OK) {
    ev.kind = ST_BUILD_EV_BUILDING;
    emit(c, &ev);
    double t0 = st_now();
    rc = build_layer(c, li, &in, &c->layers[li], &ev.bytes_new, err);
    if (rc == ST_OK && below_known)
      rc = compute_key(c, li, &in, below, &k, err);
    if (rc == ST_OK)
      rc = st_build_key_set(c->s, &k, &c->layers[li], err);
    if (rc == ST_OK)
      rc = layer_bytes(c->s, &c->layers[li], &c->sizes[li], err);
    ev.kind = ST_BUILD_EV_BUILT;
    ev.key = *key = k;
    *key_known = true;
    ev.digest = c->layers[li];
    ev.bytes = c->sizes[li];
    ev.seconds = st_now() - t0;
    if (rc == ST_OK)
      emit(c, &ev);
  }
  free(in.d);
  free(in.known);
  return rc;
}

/* The config of the last oci source (the base image), nullable. */
static int base_config(struct ctx *c, st_oci_config **out, st_error *err) {
  const st_recipe_source *last = NULL;
  for (size_t i = 0; i < c->ri->n_layers; i++)
    for (size_t j = 0; j < c->ri->layers[i].n_sources; j++)
      if (c->ri->layers[i].sources[j].kind == ST_SOURCE_OCI)
        last = &c->ri->layers[i].sources[j];
  *out = NULL;
  if (!last)
    return ST_OK;
  int rc = st_source_oci_config(last->paths[0], last->ref, out, NULL, err);
  return rc < 0 ? st_error_prefix(err, "%s:%d:%d", last->recipe_file, last->loc.line,
                                  last->loc.col)
                : ST_OK;
}

/* Appends the pairs of from whose keys are not in over (sorted), then over's. */
static int merge_kvs(st_kv **out, size_t *n_out, const st_kv *from, size_t n_from,
                     const st_recipe_kv *over, size_t n_over) {
  st_kv *v = calloc(n_from + n_over + 1, sizeof *v);
  if (!v)
    return -1;
  *out = v;
  size_t n = 0;
  for (size_t i = 0; i < n_from; i++) {
    bool dup = false;
    for (size_t j = 0; j < n_over && !dup; j++)
      dup = !strcmp(over[j].key, from[i].key);
    for (size_t j = i + 1; j < n_from && !dup; j++) /* a later base entry wins */
      dup = !strcmp(from[j].key, from[i].key);
    if (dup)
      continue;
    if (!(v[n].key = strdup(from[i].key)) || !(v[n++].value = strdup(from[i].value))) {
      *n_out = n;
      return -1;
    }
  }
  for (size_t j = 0; j < n_over; j++)
    if (!(v[n].key = strdup(over[j].key)) || !(v[n++].value = strdup(over[j].value))) {
      *n_out = n;
      return -1;
    }
  *n_out = n;
  return 0;
}

/* The recipe's config over the base image's: env and labels merged by name
 * (the recipe wins), workdir and entrypoint the recipe's when it sets them,
 * else the base's (its Entrypoint followed by its Cmd: the command the base
 * image runs). */
static bool config_fill(st_image *img, const st_recipe_instance *ri, const st_oci_config *base) {
  static const st_oci_config none = {0};
  if (!base)
    base = &none;
  if (merge_kvs(&img->env, &img->n_env, base->env, base->n_env, ri->env, ri->n_env) < 0 ||
      merge_kvs(&img->labels, &img->n_labels, base->labels, base->n_labels, ri->labels,
                ri->n_labels) < 0)
    return false;
  bool own = ri->has_entrypoint || ri->n_entrypoint;
  size_t n = own ? ri->n_entrypoint : base->n_entrypoint + base->n_cmd;
  img->entrypoint = calloc(n + 1, sizeof *img->entrypoint);
  if (!img->entrypoint)
    return false;
  for (size_t i = 0; i < n; i++, img->n_entrypoint++) {
    const char *a = own ? ri->entrypoint[i]
                    : i < base->n_entrypoint ? base->entrypoint[i]
                                             : base->cmd[i - base->n_entrypoint];
    if (!(img->entrypoint[i] = strdup(a)))
      return false;
  }
  const char *wd = ri->workdir ? ri->workdir : base->workdir;
  return !wd || (img->workdir = strdup(wd)) != NULL;
}

static int make_image(struct ctx *c, st_digest *out, st_error *err) {
  const st_recipe_instance *ri = c->ri;
  _cleanup_(st_image_freep) st_image *img = calloc(1, sizeof *img);
  if (!img)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  _cleanup_(st_oci_config_freep) st_oci_config *base = NULL;
  int rc = base_config(c, &base, err);
  if (rc < 0)
    return rc;
  img->layers = calloc(ri->n_layers + 1, sizeof *img->layers);
  bool ok = img->layers != NULL;
  for (size_t i = 0; ok && i < ri->n_layers; i++, img->n_layers++)
    ok = (img->layers[i] = (st_image_layer){c->layers[i], strdup(ri->layers[i].name),
                                            c->sizes[i]}).name != NULL;
  if (!ok || !config_fill(img, ri, base))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  rc = st_image_normalize(img, err);
  if (rc == ST_OK)
    rc = st_image_save(c->s, img, out, err);
  if (rc == ST_OK)
    rc = st_tag_set(c->s, ri->image, ri->tag, out, err);
  return rc;
}

int st_build_instance(st_store *s, const st_recipe_instance *ri, const st_build_opts *o,
                      st_digest *image_out, st_error *err) {
  struct ctx c = {.s = s, .ri = ri, .o = o};
  c.layers = calloc(ri->n_layers + 1, sizeof *c.layers);
  c.sizes = calloc(ri->n_layers + 1, sizeof *c.sizes);
  int rc = c.layers && c.sizes ? ST_OK : st_error_set(err, ST_ENOMEM, "out of memory");
  st_digest key = {{0}};
  bool key_known = false;
  for (size_t i = 0; i < ri->n_layers && rc == ST_OK; i++) {
    if (o->cancel && atomic_load(o->cancel))
      rc = st_error_set(err, ST_ECANCELED, "%s: cancelled before layer '%s'", ri->ref,
                        ri->layers[i].name);
    else
      rc = do_layer(&c, i, &key, &key_known, err);
  }
  st_digest img;
  if (rc == ST_OK && !o->dry_run) {
    rc = make_image(&c, &img, err);
    if (rc == ST_OK) {
      st_build_event ev = {.kind = ST_BUILD_EV_IMAGE, .digest = img};
      emit(&c, &ev);
      if (image_out)
        *image_out = img;
    }
  }
  free(c.layers);
  free(c.sizes);
  return rc;
}
