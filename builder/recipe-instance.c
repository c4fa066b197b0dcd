/* SPDX-License-Identifier: Apache-2.0 */
/* Instantiating a recipe for one cell: variables substituted, inputs resolved against the
 * directory of the recipe file that declared them and checked on disk (deb globs expanded
 * and sorted), defaults applied; and the canonical text of one layer for the cache key. */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cleanup.h"
#include "recipe-private.h"

const char *st_source_kind_name(st_source_kind kind) {
  switch (kind) {
  case ST_SOURCE_DIR: return "dir";
  case ST_SOURCE_ARCHIVE: return "archive";
  case ST_SOURCE_DEB: return "deb";
  case ST_SOURCE_FILE: return "file";
  case ST_SOURCE_OCI: return "oci";
  }
  return "?";
}

static void strv_free(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    free(v[i]);
  free(v);
}

static void kvs_free(st_recipe_kv *kv, size_t n) {
  for (size_t i = 0; kv && i < n; i++) {
    free(kv[i].key);
    free(kv[i].value);
  }
  free(kv);
}

static void source_clear(st_recipe_source *s) {
  strv_free(s->paths, s->n_paths);
  strv_free(s->rel_paths, s->n_paths);
  free(s->dest);
  free(s->ref);
  free(s->recipe_file);
}

void st_recipe_instance_free(st_recipe_instance *ri) {
  if (!ri)
    return;
  for (size_t i = 0; ri->layers && i < ri->n_layers; i++) {
    st_recipe_layer *l = &ri->layers[i];
    for (size_t j = 0; l->sources && j < l->n_sources; j++)
      source_clear(&l->sources[j]);
    free(l->sources);
    strv_free(l->deletes, l->n_deletes);
    strv_free(l->runs, l->n_runs);
    free(l->name);
    free(l->recipe_file);
  }
  free(ri->layers);
  kvs_free(ri->env, ri->n_env);
  kvs_free(ri->labels, ri->n_labels);
  strv_free(ri->entrypoint, ri->n_entrypoint);
  free(ri->workdir);
  free(ri->image);
  free(ri->tag);
  free(ri->ref);
  free(ri->cell_name);
  free(ri);
}
ST_DEFINE_FREEP(st_recipe_instance, st_recipe_instance_free)

/* ---- paths ---- */

/* Lexical normalisation: no empty or "." components, no trailing slash; ".." is kept. An
 * empty relative result is ".". */
static char *norm(const char *p) {
  size_t n = strlen(p);
  char *out = malloc(n + 2);
  if (!out)
    return NULL;
  size_t o = 0;
  if (p[0] == '/')
    out[o++] = '/';
  for (const char *c = p; *c;) {
    size_t len = strcspn(c, "/");
    if (len && !(len == 1 && c[0] == '.')) {
      if (o && out[o - 1] != '/')
        out[o++] = '/';
      memcpy(out + o, c, len);
      o += len;
    }
    c += len;
    c += *c == '/';
  }
  if (o == 0)
    out[o++] = '.';
  out[o] = '\0';
  return out;
}

static bool has_dotdot(const char *p) {
  for (const char *c = p; (c = strstr(c, "..")); c += 2)
    if ((c == p || c[-1] == '/') && (c[2] == '\0' || c[2] == '/'))
      return true;
  return false;
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static char *join(const char *dir, const char *rel) {
  char *s = NULL;
  if (rel[0] == '/')
    return norm(rel);
  if (asprintf(&s, "%s/%s", dir, rel) < 0)
    return NULL;
  char *n = norm(s);
  free(s);
  return n;
}

/* v must be an absolute path without ".."; *out gets it normalised. */
static int check_abs(char **out, const char *v, st_rpos pos, const char *what, st_error *err) {
  if (v[0] != '/' || has_dotdot(v))
    return st_rerr(err, ST_EFORMAT, pos, "%s must be an absolute path without '..', not '%.64s'",
                   what, v);
  if (!(*out = norm(v)))
    return st_room(err);
  return 0;
}

/* Substitutes s, then check_abs. */
static int subst_abs(char **out, const st_rstr *s, const st_cell *cell, const char *what,
                     st_error *err) {
  _cleanup_free_ char *v = NULL;
  int rc = st_rsubst(&v, s, cell, err);
  return rc < 0 ? rc : check_abs(out, v, s->pos, what, err);
}

/* ---- sources ---- */

static int stat_input(const st_rsource *rs, const char *abs, st_error *err) {
  const char *kind = st_source_kind_name(rs->kind);
  struct stat st;
  if (stat(abs, &st) < 0) {
    int code = errno == ENOENT || errno == ENOTDIR ? ST_ENOENT : st_code_from_errno(errno);
    return st_rerr(err, code, rs->path.pos, "%s: cannot find '%.200s': %s", kind, abs,
                   strerror(errno));
  }
  if (rs->kind == ST_SOURCE_OCI) { /* a layout directory, or a tarball */
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
      return st_rerr(err, ST_EFORMAT, rs->path.pos, "%s: '%.200s' is neither a directory nor "
                     "a regular file", kind, abs);
    return 0;
  }
  bool want_dir = rs->kind == ST_SOURCE_DIR;
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return st_rerr(err, ST_EFORMAT, rs->path.pos, "%s: '%.200s' is not a %s", kind, abs,
                   want_dir ? "directory" : "regular file");
  return 0;
}

static int add_path(st_recipe_source *s, char *abs, char *rel, st_error *err) {
  if (!abs || !rel) {
    free(abs);
    free(rel);
    return st_room(err);
  }
  s->paths[s->n_paths] = abs;
  s->rel_paths[s->n_paths++] = rel;
  return 0;
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir with glob metacharacters escaped, then "/" and the pattern. */
static char *glob_pattern(const char *dir, const char *pattern) {
  if (pattern[0] == '/')
    return strdup(pattern);
  char *out = malloc(strlen(dir) * 2 + strlen(pattern) + 2), *o = out;
  if (!out)
    return NULL;
  for (const char *c = dir; *c; c++) {
    if (strchr("*?[]\\", *c))
      *o++ = '\\';
    *o++ = *c;
  }
  *o++ = '/';
  strcpy(o, pattern);
  return out;
}

static int expand_deb(st_recipe_source *s, const st_rsource *rs, const char *path,
                      st_error *err) {
  const char *dir = rs->path.pos.file->dir;
  _cleanup_free_ char *pattern = glob_pattern(dir, path);
  if (!pattern)
    return st_room(err);
  glob_t g = {0};
  int grc = glob(pattern, GLOB_NOSORT, NULL, &g);
  if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
    globfree(&g);
    return st_rerr(err, ST_ENOENT, rs->path.pos, "deb: no file matches '%.200s'", path);
  }
  if (grc != 0 || g.gl_pathc > ST_RECIPE_MAX_GLOB) {
    globfree(&g);
    return grc == GLOB_NOSPACE ? st_room(err)
           : grc ? st_rerr(err, ST_EIO, rs->path.pos, "deb: cannot expand '%.200s'", path)
                 : st_rerr(err, ST_EFORMAT, rs->path.pos, "deb: '%.200s' matches more than %d "
                           "files", path, ST_RECIPE_MAX_GLOB);
  }
  qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, str_cmp);
  int rc = 0;
  s->paths = calloc(g.gl_pathc, sizeof *s->paths);
  s->rel_paths = calloc(g.gl_pathc, sizeof *s->rel_paths);
  if (!s->paths || !s->rel_paths)
    rc = st_room(err);
  size_t dl = strlen(dir);
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
    const char *m = g.gl_pathv[i];
    bool under = path[0] != '/' && !strncmp(m, dir, dl) && m[dl] == '/';
    rc = stat_input(rs, m, err);
    if (rc == 0)
      rc = add_path(s, norm(m), norm(under ? m + dl + 1 : m), err);
  }
  globfree(&g);
  return rc;
}

static int source_dest(st_recipe_source *s, const st_rsource *rs, const st_cell *cell,
                       st_error *err) {
  if (!rs->dest.s) {
    if (rs->kind != ST_SOURCE_FILE)
      s->dest = strdup("/");
    else if (asprintf(&s->dest, "/%s", base_name(s->paths[0])) < 0)
      s->dest = NULL;
    return s->dest ? 0 : st_room(err);
  }
  _cleanup_free_ char *d = NULL;
  int rc = st_rsubst(&d, &rs->dest, cell, err);
  if (rc < 0)
    return rc;
  size_t n = strlen(d);
  if (rs->kind == ST_SOURCE_FILE && n && d[n - 1] == '/') { /* into that directory */
    char *full = NULL;
    if (asprintf(&full, "%s%s", d, base_name(s->paths[0])) < 0)
      return st_room(err);
    free(d);
    d = full;
  }
  return check_abs(&s->dest, d, rs->dest.pos, "dest", err);
}

static int inst_source(st_recipe_source *s, const st_rsource *rs, const st_cell *cell,
                       st_error *err) {
  s->kind = rs->kind;
  s->loc = rs->path.pos.loc;
  s->recipe_file = strdup(rs->path.pos.file->display);
  if (!s->recipe_file)
    return st_room(err);
  _cleanup_free_ char *path = NULL;
  int rc = st_rsubst(&path, &rs->path, cell, err);
  if (rc < 0)
    return rc;
  if (!path[0])
    return st_rerr(err, ST_EFORMAT, rs->path.pos, "%s: empty path after substitution",
                   st_source_kind_name(rs->kind));
  if (rs->kind == ST_SOURCE_DEB) {
    rc = expand_deb(s, rs, path, err);
  } else {
    s->paths = calloc(1, sizeof *s->paths);
    s->rel_paths = calloc(1, sizeof *s->rel_paths);
    rc = s->paths && s->rel_paths
             ? add_path(s, join(rs->path.pos.file->dir, path), norm(path), err)
             : st_room(err);
    if (rc == 0)
      rc = stat_input(rs, s->paths[0], err);
  }
  if (rc == 0)
    rc = source_dest(s, rs, cell, err);
  if (rc == 0 && rs->ref.s && !(s->ref = strdup(rs->ref.s)))
    rc = st_room(err);
  s->strip = rs->strip > 0 ? (unsigned)rs->strip : 0;
  s->mode = rs->mode;
  s->owner_source = rs->owner == ST_ROWNER_SOURCE;
  s->uid = rs->owner == ST_ROWNER_IDS ? rs->uid : 0;
  s->gid = rs->owner == ST_ROWNER_IDS ? rs->gid : 0;
  return rc;
}

/* ---- layers and config ---- */

static int subst_list(char ***out, size_t *n_out, const st_rstr *v, size_t n,
                      const st_cell *cell, bool absolute, st_error *err) {
  *out = calloc(n ? n : 1, sizeof **out);
  if (!*out)
    return st_room(err);
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++, (*n_out)++)
    rc = absolute ? subst_abs(&(*out)[i], &v[i], cell, "delete", err)
                  : st_rsubst(&(*out)[i], &v[i], cell, err);
  for (size_t i = 0; rc == 0 && absolute && i < n; i++)
    if (!strcmp((*out)[i], "/"))
      rc = st_rerr(err, ST_EFORMAT, v[i].pos, "delete: cannot delete '/'");
  return rc;
}

static int inst_layer(st_recipe_layer *l, const st_rlayer *rl, const st_cell *cell,
                      st_error *err) {
  l->name = strdup(rl->name.s);
  l->recipe_file = strdup(rl->pos.file->display);
  l->loc = rl->pos.loc;
  if (!l->name || !l->recipe_file)
    return st_room(err);
  l->sources = rl->n_sources ? calloc(rl->n_sources, sizeof *l->sources) : NULL;
  if (rl->n_sources && !l->sources)
    return st_room(err);
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < rl->n_sources; i++, l->n_sources++)
    rc = inst_source(&l->sources[i], &rl->sources[i], cell, err);
  if (rc == 0)
    rc = subst_list(&l->deletes, &l->n_deletes, rl->deletes, rl->n_deletes, cell, true, err);
  if (rc == 0)
    rc = subst_list(&l->runs, &l->n_runs, rl->runs, rl->n_runs, cell, false, err);
  return rc;
}

static int kv_cmp(const void *a, const void *b) {
  return strcmp(((const st_recipe_kv *)a)->key, ((const st_recipe_kv *)b)->key);
}

static int inst_kvs(st_recipe_kv **out, size_t *n_out, const st_rkv *v, size_t n,
                    const st_cell *cell, st_error *err) {
  *out = calloc(n ? n : 1, sizeof **out);
  if (!*out)
    return st_room(err);
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++, (*n_out)++) {
    (*out)[i].key = strdup(v[i].key.s);
    rc = (*out)[i].key ? st_rsubst(&(*out)[i].value, &v[i].value, cell, err) : st_room(err);
  }
  if (rc == 0)
    qsort(*out, n, sizeof **out, kv_cmp);
  return rc;
}

static int inst_config(st_recipe_instance *ri, const st_recipe *r, const st_cell *cell,
                       st_error *err) {
  int rc = inst_kvs(&ri->env, &ri->n_env, r->env, r->n_env, cell, err);
  if (rc == 0)
    rc = inst_kvs(&ri->labels, &ri->n_labels, r->labels, r->n_labels, cell, err);
  if (rc == 0 && r->workdir.s)
    rc = subst_abs(&ri->workdir, &r->workdir, cell, "workdir", err);
  if (rc == 0)
    rc = subst_list(&ri->entrypoint, &ri->n_entrypoint, r->entrypoint, r->n_entrypoint, cell,
                    false, err);
  ri->has_entrypoint = r->has_entrypoint;
  return rc;
}

/* The cell must have r's axes, in order, with values from them. */
static bool cell_belongs(const st_recipe *r, const st_cell *c) {
  if (c->n != r->n_axes)
    return false;
  for (size_t i = 0; i < c->n; i++) {
    const st_raxis *a = &r->axes[i];
    bool found = false;
    for (size_t v = 0; v < a->n_values && !found; v++)
      found = !strcmp(a->values[v].s, c->values[i]);
    if (strcmp(a->name.s, c->names[i]) || !found)
      return false;
  }
  return true;
}

int st_recipe_instantiate(const st_recipe *r, const st_cell *cell, st_recipe_instance **out,
                          st_error *err) {
  _cleanup_(st_recipe_instance_freep) st_recipe_instance *ri = calloc(1, sizeof *ri);
  if (!ri || !(ri->cell_name = st_cell_name(cell)))
    return st_room(err);
  if (!cell_belongs(r, cell))
    return st_error_set(err, ST_EINVAL, "%s: cell '%.200s' is not a cell of this recipe",
                        r->files[0]->display, ri->cell_name);
  st_rstr latest = {"latest", r->top};
  int rc = st_rsubst(&ri->tag, r->tag.s ? &r->tag : &latest, cell, err);
  if (rc < 0)
    return rc;
  ri->image = strdup(r->image.s);
  if (!ri->image || asprintf(&ri->ref, "%s:%s", ri->image, ri->tag) < 0) {
    ri->ref = NULL;
    return st_room(err);
  }
  ri->layers = calloc(r->n_layers, sizeof *ri->layers);
  if (!ri->layers)
    return st_room(err);
  for (size_t i = 0; rc == 0 && i < r->n_layers; i++, ri->n_layers++)
    rc = inst_layer(&ri->layers[i], &r->layers[i], cell, err);
  if (rc == 0)
    rc = inst_config(ri, r, cell, err);
  if (rc < 0)
    return rc;
  *out = ST_TAKE_PTR(ri);
  return 0;
}

/* ---- canonical layer text ---- */

/* Appends s escaped: backslash and control bytes as \xHH, and spaces too if space. */
static void put_esc(FILE *f, const char *s, bool space) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c < 0x20 || *c == 0x7f || *c == '\\' || (space && *c == ' '))
      fprintf(f, "\\x%02x", *c);
    else
      fputc(*c, f);
  }
}

static void put_source(FILE *f, const st_recipe_source *s) {
  for (size_t p = 0; p < s->n_paths; p++) {
    fprintf(f, "source %s ", st_source_kind_name(s->kind));
    put_esc(f, s->rel_paths[p], true);
    fputs(" dest=", f);
    put_esc(f, s->dest, true);
    if (s->kind == ST_SOURCE_ARCHIVE)
      fprintf(f, " strip=%u", s->strip);
    if (s->kind == ST_SOURCE_OCI && s->ref) {
      fputs(" ref=", f);
      put_esc(f, s->ref, true);
    }
    if (s->kind == ST_SOURCE_FILE && s->mode >= 0)
      fprintf(f, " mode=%04o", (unsigned)s->mode);
    else if (s->kind == ST_SOURCE_FILE)
      fputs(" mode=keep", f);
    if ((s->kind == ST_SOURCE_DIR || s->kind == ST_SOURCE_FILE) && s->owner_source)
      fputs(" owner=source", f);
    else if (s->kind == ST_SOURCE_DIR || s->kind == ST_SOURCE_FILE)
      fprintf(f, " owner=%u:%u", (unsigned)s->uid, (unsigned)s->gid);
    fputc('\n', f);
  }
}

char *st_recipe_layer_canonical(const st_recipe_instance *ri, size_t layer_index) {
  const st_recipe_layer *l = &ri->layers[layer_index];
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  fputs("strata-layer 1\n", f);
  for (size_t i = 0; i < l->n_sources; i++)
    put_source(f, &l->sources[i]);
  for (size_t i = 0; i < l->n_deletes; i++) {
    fputs("delete ", f);
    put_esc(f, l->deletes[i], false);
    fputc('\n', f);
  }
  for (size_t i = 0; l->n_runs && i < ri->n_env; i++) { /* run steps see the image env */
    fprintf(f, "env %s=", ri->env[i].key);
    put_esc(f, ri->env[i].value, false);
    fputc('\n', f);
  }
  for (size_t i = 0; i < l->n_runs; i++) {
    fputs("run ", f);
    put_esc(f, l->runs[i], false);
    fputc('\n', f);
  }
  if (ferror(f)) {
    fclose(f);
    free(buf);
    return NULL;
  }
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}
