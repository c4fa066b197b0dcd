/* SPDX-License-Identifier: Apache-2.0 */
/* Build contexts: packing the files a recipe reads into a layer (client side), and
 * materialising, loading and checking them again in a private directory (server side). */
#include "context.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "fs.h"
#include "source.h"
#include "unpack.h"

ST_DEFINE_FREEP(st_recipe, st_recipe_free)
ST_DEFINE_FREEP(st_cell_filter, st_cell_filter_free)

void st_build_request_clear(st_build_request *req) {
  if (!req)
    return;
  free(req->recipe_name);
  free(req->recipe_text);
  free(req->cells);
  *req = (st_build_request){0};
}

/* ---- paths ---- */

/* p made absolute (against the current directory) with ".", ".." and repeated '/' resolved
 * lexically. malloc'd; NULL on OOM or when the current directory is unknown. */
static char *norm_abs(const char *p) {
  char cwd[PATH_MAX];
  char *joined = NULL;
  if (p[0] != '/') {
    if (!getcwd(cwd, sizeof cwd) || asprintf(&joined, "%s/%s", cwd, p) < 0)
      return NULL;
    p = joined;
  }
  size_t n = strlen(p);
  char *out = malloc(n + 2);
  if (!out) {
    free(joined);
    return NULL;
  }
  size_t o = 0;
  for (const char *c = p; *c;) {
    while (*c == '/')
      c++;
    size_t len = strcspn(c, "/");
    if (len == 0 || (len == 1 && c[0] == '.')) {
      /* nothing */
    } else if (len == 2 && c[0] == '.' && c[1] == '.') {
      while (o > 0 && out[o - 1] != '/')
        o--;
      if (o > 0)
        o--; /* the '/' before the dropped component */
    } else {
      out[o++] = '/';
      memcpy(out + o, c, len);
      o += len;
    }
    c += len;
  }
  if (o == 0)
    out[o++] = '/';
  out[o] = '\0';
  free(joined);
  return out;
}

/* The directory part of an absolute normalised path ("/" for "/x"). */
static char *dir_of(const char *abs) {
  const char *sl = strrchr(abs, '/');
  return sl == abs ? strdup("/") : strndup(abs, (size_t)(sl - abs));
}

/* Shortens the absolute directory *root to the deepest ancestor it shares with dir. */
static void common_root(char *root, const char *dir) {
  size_t i = 0, last = 0;
  while (root[i] && root[i] == dir[i]) {
    if (root[i] == '/')
      last = i;
    i++;
  }
  if (!root[i] && (dir[i] == '/' || !dir[i]))
    return; /* root is an ancestor of dir (or equal) */
  root[last ? last : 1] = '\0';
}

/* The path of abs below root ("" for root itself). */
static const char *below(const char *root, const char *abs) {
  size_t n = strlen(root);
  if (n == 1)
    return abs + 1;
  return abs[n] == '/' ? abs + n + 1 : abs + n;
}

/* ---- selecting cells ---- */

void st_build_instances_free(st_recipe_instance **v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    st_recipe_instance_free(v[i]);
  free(v);
}

static int select_instances(const st_recipe *r, const char *cells, st_recipe_instance ***out,
                            size_t *n_out, st_error *err) {
  _cleanup_(st_cell_filter_freep) st_cell_filter *filter = NULL;
  if (cells && *cells) {
    int rc = st_recipe_cell_filter_parse(r, cells, &filter, err);
    if (rc < 0)
      return rc;
  }
  st_cell *cv = NULL;
  size_t nc = 0;
  int rc = st_recipe_cells(r, &cv, &nc, err);
  if (rc < 0)
    return rc;
  st_recipe_instance **v = calloc(nc, sizeof *v);
  size_t n = 0;
  if (!v)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < nc && rc == ST_OK; i++)
    if (st_cell_matches(filter, &cv[i]) && (rc = st_recipe_instantiate(r, &cv[i], &v[n], err)) == ST_OK)
      n++;
  st_cells_free(cv, nc);
  if (rc == ST_OK && n == 0)
    rc = st_error_set(err, ST_EINVAL, "--cell %s matches no cell of the recipe", cells);
  if (rc < 0) {
    st_build_instances_free(v, n);
    return rc;
  }
  *out = v;
  *n_out = n;
  return ST_OK;
}

/* ---- client side: packing ---- */

struct item {
  char *abs; /* absolute normalised path (owned) */
  bool dir;
};

struct items {
  struct item *v;
  size_t n, cap;
};

static int items_add(struct items *it, const char *path, bool dir, st_error *err) {
  if (it->n == it->cap) {
    size_t cap = it->cap ? 2 * it->cap : 16;
    struct item *v = realloc(it->v, cap * sizeof *v);
    if (!v)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    it->v = v;
    it->cap = cap;
  }
  char *abs = norm_abs(path);
  if (!abs)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  it->v[it->n++] = (struct item){abs, dir};
  return ST_OK;
}

static void items_free(struct items *it) {
  for (size_t i = 0; i < it->n; i++)
    free(it->v[i].abs);
  free(it->v);
}

static int item_cmp(const void *a, const void *b) {
  const struct item *x = a, *y = b;
  int c = strcmp(x->abs, y->abs);
  return c ? c : (int)x->dir - (int)y->dir;
}

/* Every file the selected cells read, with a server-visible (relative) path. */
static int collect(const st_recipe *r, st_recipe_instance **v, size_t n, struct items *it,
                   st_error *err) {
  for (size_t i = 1; i < st_recipe_file_count(r); i++) {
    int rc = items_add(it, st_recipe_file_path(r, i), false, err);
    if (rc < 0)
      return rc;
  }
  for (size_t i = 0; i < n; i++)
    for (size_t l = 0; l < v[i]->n_layers; l++) {
      const st_recipe_layer *ly = &v[i]->layers[l];
      for (size_t s = 0; s < ly->n_sources; s++) {
        const st_recipe_source *src = &ly->sources[s];
        for (size_t p = 0; p < src->n_paths; p++) {
          if (src->rel_paths[p][0] == '/')
            return st_error_set(err, ST_EFORMAT,
                                "%s:%d:%d: layer '%s': absolute input path '%s' cannot be sent "
                                "to a build server; write it relative to the recipe",
                                src->recipe_file, src->loc.line, src->loc.col, ly->name,
                                src->rel_paths[p]);
          struct stat st; /* an oci source is a layout directory or a tarball */
          bool dir = src->kind == ST_SOURCE_DIR ||
                     (src->kind == ST_SOURCE_OCI && stat(src->paths[p], &st) == 0 &&
                      S_ISDIR(st.st_mode));
          int rc = items_add(it, src->paths[p], dir, err);
          if (rc < 0)
            return rc;
        }
      }
    }
  if (it->n)
    qsort(it->v, it->n, sizeof *it->v, item_cmp);
  return ST_OK;
}

static int pack_items(st_store *s, const struct items *it, const char *root, unsigned threads,
                      st_digest *out, st_pack_stats *stats, st_error *err) {
  _cleanup_(st_layer_writer_freep) st_layer_writer *w = NULL;
  int rc = st_layer_writer_new(&w, s, threads, err);
  if (rc < 0)
    return rc;
  st_layer_writer_set_dir_defaults(w, 0755, 0, 0, 0);
  for (size_t i = 0; i < it->n && rc == ST_OK; i++) {
    if (i > 0 && !strcmp(it->v[i].abs, it->v[i - 1].abs) && it->v[i].dir == it->v[i - 1].dir)
      continue;
    st_source_opts so = {.dest = below(root, it->v[i].abs), .owner = ST_OWNER_SOURCE};
    rc = it->v[i].dir ? st_source_dir(w, it->v[i].abs, &so, err)
                      : st_source_file(w, it->v[i].abs, &so, err);
  }
  if (rc == ST_OK)
    rc = st_layer_writer_finish(w, out, NULL, err);
  if (rc == ST_OK && stats)
    *stats = *st_layer_writer_stats(w);
  return rc < 0 ? st_error_prefix(err, "build context") : ST_OK;
}

int st_build_context_pack(st_store *s, const char *recipe_path, const char *cells,
                          int64_t mtime, unsigned threads, st_build_request *out,
                          st_pack_stats *stats, st_error *err) {
  _cleanup_(st_recipe_freep) st_recipe *r = NULL;
  int rc = st_recipe_load(&r, recipe_path, err);
  if (rc < 0)
    return rc;
  st_recipe_instance **v = NULL;
  size_t n = 0;
  if ((rc = select_instances(r, cells, &v, &n, err)) < 0)
    return rc;
  struct items it = {0};
  rc = collect(r, v, n, &it, err);
  st_build_instances_free(v, n);
  /* the recipe's own directory, as the loader resolved it (symlinks followed) */
  _cleanup_free_ char *rdir_given = NULL, *rdir = NULL, *rabs = NULL, *root = NULL;
  const char *base = strrchr(recipe_path, '/');
  if (rc == ST_OK && !(rdir_given = base ? strndup(recipe_path, (size_t)(base - recipe_path) + 1)
                                         : strdup(".")))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK && !(rdir = realpath(rdir_given, NULL)))
    rc = st_error_errno(err, errno, "%s", recipe_path);
  if (rc == ST_OK && (asprintf(&rabs, "%s/%s", rdir, base ? base + 1 : recipe_path) < 0 ||
                      !(root = dir_of(rabs))))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; rc == ST_OK && i < it.n; i++) {
    _cleanup_free_ char *d = it.v[i].dir ? strdup(it.v[i].abs) : dir_of(it.v[i].abs);
    if (!d)
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
    else
      common_root(root, d);
  }
  st_build_request req = {.mtime = mtime, .has_context = it.n > 0};
  if (rc == ST_OK && it.n)
    rc = pack_items(s, &it, root, threads, &req.context, stats, err);
  items_free(&it);
  if (rc == ST_OK && stats && !req.has_context)
    *stats = (st_pack_stats){0};
  uint8_t *text = NULL;
  if (rc == ST_OK)
    rc = st_read_file_at(AT_FDCWD, recipe_path, ST_RECIPE_MAX_BYTES, &text, &req.recipe_len, err);
  req.recipe_text = (char *)text;
  if (rc == ST_OK && (!(req.recipe_name = strdup(below(root, rabs))) ||
                      (cells && *cells && !(req.cells = strdup(cells)))))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc < 0) {
    st_build_request_clear(&req);
    return rc;
  }
  *out = req;
  return ST_OK;
}

int st_build_request_check(const st_build_request *req, st_error *err) {
  if (!req->recipe_name || !*req->recipe_name)
    return st_error_set(err, ST_EINVAL, "build request: no recipe name");
  st_error tmp = {0};
  if (st_path_check(req->recipe_name, &tmp) < 0)
    return st_error_set(err, ST_EINVAL, "build request: recipe name: %s", tmp.msg);
  if (!req->recipe_text)
    return st_error_set(err, ST_EINVAL, "build request: no recipe text");
  if (req->recipe_len > ST_RECIPE_MAX_BYTES)
    return st_error_set(err, ST_EINVAL, "build request: recipe %s is larger than %u bytes",
                        req->recipe_name, ST_RECIPE_MAX_BYTES);
  if (req->cells && strlen(req->cells) > 4096)
    return st_error_set(err, ST_EINVAL, "build request: cell filter longer than 4096 bytes");
  return ST_OK;
}

/* ---- server side ---- */

struct st_build_context {
  char *dir;            /* as given (owned) */
  char *real;           /* realpath of dir (owned) */
  st_layer_index *idx;  /* nullable: no context */
};

void st_build_context_free(st_build_context *c) {
  if (!c)
    return;
  if (c->dir)
    st_remove_tree(AT_FDCWD, c->dir, NULL);
  free(c->dir);
  free(c->real);
  st_layer_index_free(c->idx);
  free(c);
}

int st_build_context_open(st_build_context **out, st_store *s, const st_build_request *req,
                          const char *dir, unsigned threads, st_error *err) {
  int rc = st_build_request_check(req, err);
  if (rc < 0)
    return rc;
  struct stat st;
  if (lstat(dir, &st) == 0 || errno != ENOENT)
    return st_error_set(err, ST_EEXIST, "build context %s: already exists", dir);
  _cleanup_(st_build_context_freep) st_build_context *c = calloc(1, sizeof *c);
  if (!c || !(c->dir = strdup(dir))) /* from here on, freeing c removes dir */
    return st_error_set(err, ST_ENOMEM, "out of memory");
  if (req->has_context) {
    rc = st_layer_index_load(&c->idx, s, &req->context, err);
    if (rc < 0)
      return st_error_prefix(err, "build context");
    st_unpack_opts uo = st_unpack_opts_default();
    uo.threads = threads;
    rc = st_layer_unpack(s, c->idx, dir, &uo, NULL, err);
    if (rc < 0)
      return st_error_prefix(err, "build context");
  } else if (mkdir(dir, 0755) < 0) {
    return st_error_errno(err, errno, "build context %s", dir);
  }
  if (!(c->real = realpath(dir, NULL)))
    return st_error_errno(err, errno, "build context %s", dir);
  *out = ST_TAKE_PTR(c);
  return ST_OK;
}

/* ST_EUNSAFE unless path resolves to somewhere inside the context. */
static int check_inside(const st_build_context *c, const char *path, const char *what,
                        st_error *err) {
  size_t n = strlen(c->real);
  /* named as the recipe sees it: relative to the context, or as written */
  const char *shown = !strncmp(path, c->real, n) && path[n] == '/' ? path + n + 1 : path;
  _cleanup_free_ char *real = realpath(path, NULL);
  if (!real)
    return st_error_errno(err, errno, "%s '%s'", what, shown);
  if (strncmp(real, c->real, n) || (real[n] != '/' && real[n] != '\0'))
    return st_error_set(err, ST_EUNSAFE, "%s '%s' is outside the build context", what, shown);
  return ST_OK;
}

int st_build_context_instances(st_build_context *c, const st_build_request *req,
                               st_recipe_instance ***out, size_t *n_out, st_error *err) {
  _cleanup_free_ char *base = NULL;
  const char *sl = strrchr(req->recipe_name, '/');
  if (asprintf(&base, "%s/%.*s", c->real, sl ? (int)(sl - req->recipe_name) : 0,
               req->recipe_name) < 0)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  _cleanup_(st_recipe_freep) st_recipe *r = NULL;
  int rc = st_recipe_load_text(&r, req->recipe_name, base, req->recipe_text, req->recipe_len,
                               err);
  if (rc < 0)
    return rc;
  for (size_t i = 1; i < st_recipe_file_count(r) && rc == ST_OK; i++)
    rc = check_inside(c, st_recipe_file_path(r, i), "extends", err);
  st_recipe_instance **v = NULL;
  size_t n = 0;
  if (rc == ST_OK)
    rc = select_instances(r, req->cells, &v, &n, err);
  for (size_t i = 0; i < n && rc == ST_OK; i++)
    for (size_t l = 0; l < v[i]->n_layers && rc == ST_OK; l++)
      for (size_t s = 0; s < v[i]->layers[l].n_sources && rc == ST_OK; s++) {
        const st_recipe_source *src = &v[i]->layers[l].sources[s];
        for (size_t p = 0; p < src->n_paths && rc == ST_OK; p++)
          if ((rc = check_inside(c, src->paths[p], "input", err)) < 0)
            st_error_prefix(err, "%s:%d:%d: layer '%s'", src->recipe_file, src->loc.line,
                            src->loc.col, v[i]->layers[l].name);
      }
  if (rc < 0) {
    st_build_instances_free(v, n);
    return rc;
  }
  *out = v;
  *n_out = n;
  return ST_OK;
}

/* Hashes one context entry, its path given relative to the input. */
static void hash_entry(st_hasher *h, const st_entry *e, const char *rel) {
  char line[160];
  int n = snprintf(line, sizeof line, "%d %o %u %u %" PRIu64 " %zu:", (int)e->type,
                   (unsigned)e->mode, (unsigned)e->uid, (unsigned)e->gid, e->size, strlen(rel));
  st_hasher_update(h, line, (size_t)n);
  st_hasher_update(h, rel, strlen(rel));
  const char *t = e->target ? e->target : "";
  n = snprintf(line, sizeof line, " %zu:", strlen(t));
  st_hasher_update(h, line, (size_t)n);
  st_hasher_update(h, t, strlen(t));
  for (size_t i = 0; i < e->n_chunks; i++)
    st_hasher_update(h, e->chunks[i].digest.bytes, ST_DIGEST_LEN);
  for (size_t i = 0; i < e->n_xattrs; i++) {
    n = snprintf(line, sizeof line, " x%zu:%zu:", strlen(e->xattrs[i].name), e->xattrs[i].len);
    st_hasher_update(h, line, (size_t)n);
    st_hasher_update(h, e->xattrs[i].name, strlen(e->xattrs[i].name));
    st_hasher_update(h, e->xattrs[i].value, e->xattrs[i].len);
  }
  st_hasher_update(h, "\n", 1);
}

bool st_build_context_input_digest(const char *path, st_source_kind kind, st_digest *out,
                                   void *ud) {
  st_build_context *c = ud;
  if (!c->idx)
    return false;
  _cleanup_free_ char *abs = norm_abs(path);
  size_t n = strlen(c->real);
  if (!abs || strncmp(abs, c->real, n) || (abs[n] != '/' && abs[n] != '\0'))
    return false;
  const char *rel = below(c->real, abs);
  const st_entry *top = st_layer_index_find(c->idx, rel);
  bool dir = kind == ST_SOURCE_DIR;
  if (!top || top->type != (dir ? ST_ENTRY_DIR : ST_ENTRY_REGULAR))
    return false; /* e.g. a symlink: the engine reads the file itself */
  st_hasher *h = st_hasher_new();
  if (!h)
    return false;
  st_hasher_update(h, "strata-context-input 1\n", 23);
  size_t rl = strlen(rel);
  if (!dir) {
    hash_entry(h, top, "");
  } else {
    size_t count = st_layer_index_count(c->idx);
    for (size_t i = 0; i < count; i++) {
      const st_entry *e = st_layer_index_entry(c->idx, i);
      if (rl == 0)
        hash_entry(h, e, e->path);
      else if (!strncmp(e->path, rel, rl) && (e->path[rl] == '/' || e->path[rl] == '\0'))
        hash_entry(h, e, e->path + rl + (e->path[rl] == '/'));
    }
  }
  st_hasher_final(h, out);
  st_hasher_free(h);
  return true;
}
