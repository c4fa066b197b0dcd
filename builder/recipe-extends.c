/* SPDX-License-Identifier: Apache-2.0 */
/* Recipe files and `extends`: reads the chain base first (cycles and depth checked by file
 * identity), merges each child over its base (docs/RECIPES.md, "extends") and hands the
 * merged recipe to st_recipe_validate(). Entry points st_recipe_load/_load_text. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "recipe-private.h"

ST_DEFINE_FREEP(st_recipe, st_recipe_free)
ST_DEFINE_FREEP(st_rnode, st_rnode_free)

/* ---- extends: merging a child over its base ---- */

static int grow(void **arr, size_t n, size_t add, size_t size, st_error *err) {
  if (!add)
    return 0;
  void *p = realloc(*arr, (n + add) * size);
  if (!p)
    return st_room(err);
  *arr = p;
  return 0;
}

static void take_str(st_rstr *dst, st_rstr *src) {
  if (!src->s)
    return;
  st_rstr_clear(dst);
  *dst = *src;
  src->s = NULL;
}

static int merge_kvs(st_rkv **base, size_t *n_base, st_rkv *child, size_t n_child,
                     st_error *err) {
  int rc = grow((void **)base, *n_base, n_child, sizeof **base, err);
  for (size_t i = 0; rc == 0 && i < n_child; i++) {
    size_t j = 0;
    while (j < *n_base && strcmp((*base)[j].key.s, child[i].key.s))
      j++;
    if (j < *n_base)
      st_rkv_clear(&(*base)[j]);
    else
      (*n_base)++;
    (*base)[j] = child[i];
    memset(&child[i], 0, sizeof child[i]);
  }
  return rc;
}

/* Moves everything child sets into base (child keeps what was not taken). */
static int merge(st_recipe *base, st_recipe *c, st_error *err) {
  take_str(&base->image, &c->image);
  take_str(&base->tag, &c->tag);
  take_str(&base->matrix, &c->matrix);
  base->top = c->top;
  int rc = grow((void **)&base->axes, base->n_axes, c->n_axes, sizeof *base->axes, err);
  for (size_t i = 0; rc == 0 && i < c->n_axes; i++) {
    size_t j = 0;
    while (j < base->n_axes && strcmp(base->axes[j].name.s, c->axes[i].name.s))
      j++;
    if (j < base->n_axes)
      st_raxis_clear(&base->axes[j]);
    else
      base->n_axes++;
    base->axes[j] = c->axes[i];
    memset(&c->axes[i], 0, sizeof c->axes[i]);
  }
  if (rc == 0)
    rc = grow((void **)&base->excludes, base->n_excludes, c->n_excludes,
              sizeof *base->excludes, err);
  for (size_t i = 0; rc == 0 && i < c->n_excludes; i++) {
    base->excludes[base->n_excludes++] = c->excludes[i];
    memset(&c->excludes[i], 0, sizeof c->excludes[i]);
  }
  if (rc == 0)
    rc = grow((void **)&base->layers, base->n_layers, c->n_layers, sizeof *base->layers, err);
  for (size_t i = 0; rc == 0 && i < c->n_layers; i++) {
    size_t j = 0;
    while (j < base->n_layers && strcmp(base->layers[j].name.s, c->layers[i].name.s))
      j++;
    if (j < base->n_layers)
      st_rlayer_clear(&base->layers[j]);
    else
      base->n_layers++;
    base->layers[j] = c->layers[i];
    memset(&c->layers[i], 0, sizeof c->layers[i]);
  }
  base->has_layers |= c->has_layers;
  if (rc == 0)
    rc = merge_kvs(&base->env, &base->n_env, c->env, c->n_env, err);
  if (rc == 0)
    rc = merge_kvs(&base->labels, &base->n_labels, c->labels, c->n_labels, err);
  take_str(&base->workdir, &c->workdir);
  if (rc == 0 && c->has_entrypoint) {
    st_rstrs_free(base->entrypoint, base->n_entrypoint);
    base->entrypoint = ST_TAKE_PTR(c->entrypoint);
    base->n_entrypoint = c->n_entrypoint;
    base->has_entrypoint = true;
    c->n_entrypoint = 0;
  }
  return rc;
}

/* Exclude entries first..n_excludes-1 (written by the file just merged) must name axes of
 * the matrix as that file sees it, and values of those axes. */
static int check_excludes(const st_recipe *r, size_t first, st_error *err) {
  for (size_t i = first; i < r->n_excludes; i++) {
    const st_rexclude *e = &r->excludes[i];
    for (size_t k = 0; k < e->n; k++) {
      const st_raxis *a = NULL;
      for (size_t j = 0; j < r->n_axes && !a; j++)
        if (!strcmp(r->axes[j].name.s, e->keys[k].s))
          a = &r->axes[j];
      if (!a)
        return st_rerr(err, ST_EFORMAT, e->keys[k].pos, "exclude: unknown axis '%.64s'",
                       e->keys[k].s);
      size_t j = 0;
      while (j < a->n_values && strcmp(a->values[j].s, e->values[k].s))
        j++;
      if (j == a->n_values)
        return st_rerr(err, ST_EFORMAT, e->values[k].pos,
                       "exclude: value '%.64s' is not in axis '%.64s'", e->values[k].s,
                       a->name.s);
    }
  }
  return 0;
}

/* ---- files and the extends chain ---- */

typedef struct {
  st_rfile **files; /* every file read so far (owned until moved into the recipe) */
  size_t n_files;
  struct {
    uint64_t dev, ino;
    const st_rfile *file;
  } chain[ST_RECIPE_MAX_EXTENDS];
  size_t n_chain;
} loader;

static char *dir_part(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return strdup(".");
  if (slash == path)
    return strdup("/");
  return strndup(path, (size_t)(slash - path));
}

static char *join(const char *dir, const char *name) {
  char *s = NULL;
  if (name[0] == '/')
    return strdup(name);
  size_t n = strlen(dir);
  if (asprintf(&s, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < 0)
    return NULL;
  return s;
}

/* A new file of the chain, owned by L. dir may be NULL (set later). */
static st_rfile *add_file(loader *L, const char *display, const char *display_dir,
                          char *dir) {
  st_rfile *f = calloc(1, sizeof *f);
  st_rfile **v = realloc(L->files, (L->n_files + 1) * sizeof *v);
  if (!f || !v) {
    free(f);
    free(dir);
    if (v)
      L->files = v;
    return NULL;
  }
  L->files = v;
  L->files[L->n_files++] = f;
  f->display = strdup(display);
  f->display_dir = display_dir ? strdup(display_dir) : dir_part(display);
  f->dir = dir;
  return f->display && f->display_dir ? f : NULL;
}

/* The absolute directory of an opened file: realpath of its directory part. */
static char *abs_dir_of(const char *path) {
  _cleanup_free_ char *d = dir_part(path);
  if (!d)
    return NULL;
  char *real = realpath(d, NULL);
  if (real || errno == ENOMEM)
    return real;
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof cwd) ? join(cwd, d) : NULL;
}

static int load_level(loader *L, const st_rfile *f, const char *text, size_t len,
                      st_recipe **out, st_error *err);

static int cycle_error(loader *L, size_t from, const st_rstr *ext, const char *name,
                       st_error *err) {
  char chain[512] = "";
  for (size_t i = from; i < L->n_chain; i++)
    snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "%s -> ",
             L->chain[i].file->display);
  return st_rerr(err, ST_EFORMAT, ext->pos, "extends cycle: %s%s", chain, name);
}

static int load_base(loader *L, const st_rstr *ext, st_recipe **out, st_error *err) {
  const st_rfile *from = ext->pos.file;
  _cleanup_free_ char *path = join(from->dir, ext->s);
  _cleanup_free_ char *display =
      ext->s[0] == '/' || !strcmp(from->display_dir, ".") ? strdup(ext->s)
                                                           : join(from->display_dir, ext->s);
  if (!path || !display)
    return st_room(err);
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  uint64_t dev = 0, ino = 0;
  int rc = st_rread(path, display, ext->pos, "extends", &text, &len, &dev, &ino, err);
  if (rc < 0)
    return rc;
  for (size_t i = 0; i < L->n_chain; i++)
    if (L->chain[i].file && L->chain[i].dev == dev && L->chain[i].ino == ino)
      return cycle_error(L, i, ext, display, err);
  if (L->n_chain == ST_RECIPE_MAX_EXTENDS)
    return st_rerr(err, ST_EFORMAT, ext->pos, "extends: chain longer than %d files",
                   ST_RECIPE_MAX_EXTENDS);
  char *dir = abs_dir_of(path);
  st_rfile *f = dir ? add_file(L, display, NULL, dir) : NULL;
  if (!f || !(f->path = strdup(path)))
    return st_room(err);
  L->chain[L->n_chain].dev = dev;
  L->chain[L->n_chain].ino = ino;
  L->chain[L->n_chain++].file = f;
  rc = load_level(L, f, text, len, out, err);
  L->n_chain--;
  return rc;
}

static int load_level(loader *L, const st_rfile *f, const char *text, size_t len,
                      st_recipe **out, st_error *err) {
  _cleanup_(st_rnode_freep) st_rnode *root = NULL;
  int rc = st_rdoc_parse(&root, f, text, len, err);
  if (rc < 0)
    return rc;
  _cleanup_(st_recipe_freep) st_recipe *r = calloc(1, sizeof *r);
  if (!r)
    return st_room(err);
  st_rstr ext = {0};
  rc = st_rparse_top(r, &ext, f, root, err);
  if (rc == 0 && ext.s) {
    _cleanup_(st_recipe_freep) st_recipe *base = NULL;
    rc = load_base(L, &ext, &base, err);
    size_t first = base ? base->n_excludes : 0;
    if (rc == 0)
      rc = merge(base, r, err);
    if (rc == 0)
      rc = check_excludes(base, first, err);
    if (rc == 0) {
      st_recipe_free(r);
      r = ST_TAKE_PTR(base);
    }
  } else if (rc == 0) {
    rc = check_excludes(r, 0, err);
  }
  st_rstr_clear(&ext);
  if (rc < 0)
    return rc;
  *out = ST_TAKE_PTR(r);
  return 0;
}

static void loader_done(loader *L) {
  for (size_t i = 0; i < L->n_files; i++)
    st_rfile_free(L->files[i]);
  free(L->files);
}

static int load_root(st_recipe **out, loader *L, const st_rfile *f, const char *text,
                     size_t len, st_error *err) {
  _cleanup_(st_recipe_freep) st_recipe *r = NULL;
  int rc = load_level(L, f, text, len, &r, err);
  if (rc == 0)
    rc = st_recipe_validate(r, err);
  if (rc < 0) {
    loader_done(L);
    return rc;
  }
  r->files = ST_TAKE_PTR(L->files);
  r->n_files = L->n_files;
  *out = ST_TAKE_PTR(r);
  return 0;
}

int st_recipe_load(st_recipe **out, const char *path, st_error *err) {
  loader L = {0};
  st_rfile *f = add_file(&L, path, NULL, NULL);
  if (!f) {
    loader_done(&L);
    return st_room(err);
  }
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  uint64_t dev = 0, ino = 0;
  int rc = st_rread(path, path, (st_rpos){f, {1, 1}}, "recipe", &text, &len, &dev, &ino, err);
  if (rc == 0 && (!(f->dir = abs_dir_of(path)) || !(f->path = strdup(path))))
    rc = st_room(err);
  if (rc < 0) {
    loader_done(&L);
    return rc;
  }
  L.chain[0].dev = dev;
  L.chain[0].ino = ino;
  L.chain[0].file = f;
  L.n_chain = 1;
  return load_root(out, &L, f, text, len, err);
}

int st_recipe_load_text(st_recipe **out, const char *file_name, const char *base_dir,
                        const char *text, size_t len, st_error *err) {
  loader L = {0};
  const char *name = file_name ? file_name : "<recipe>";
  char cwd[PATH_MAX];
  char *dir = NULL;
  if (base_dir && base_dir[0] == '/')
    dir = strdup(base_dir);
  else if (getcwd(cwd, sizeof cwd))
    dir = base_dir ? join(cwd, base_dir) : strdup(cwd);
  else
    return st_error_errno(err, errno, "%s: cannot resolve the current directory", name);
  st_rfile *f = dir ? add_file(&L, name, NULL, dir) : NULL;
  if (!f) {
    loader_done(&L);
    return st_room(err);
  }
  if (len > ST_RECIPE_MAX_BYTES) {
    int rc = st_rerr(err, ST_EFORMAT, (st_rpos){f, {1, 1}},
                     "recipe: larger than %u bytes (1 MiB)", ST_RECIPE_MAX_BYTES);
    loader_done(&L);
    return rc;
  }
  return load_root(out, &L, f, text, len, err);
}

const char *st_recipe_image(const st_recipe *r) {
  return r->image.s;
}

const char *st_recipe_file(const st_recipe *r) {
  return r->files[0]->display;
}

size_t st_recipe_file_count(const st_recipe *r) {
  return r->n_files;
}

const char *st_recipe_file_path(const st_recipe *r, size_t i) {
  return i < r->n_files ? r->files[i]->path : NULL;
}
