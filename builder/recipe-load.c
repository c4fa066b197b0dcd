/* SPDX-License-Identifier: Apache-2.0 */
/* Recipe model from one file: the YAML tree of a file becomes the located recipe model (keys,
 * types and single-field rules are checked here), plus the teardown of that model. Reading
 * files and merging `extends` chains is recipe-extends.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "recipe-private.h"

/* ---- model teardown ---- */

void st_rstr_clear(st_rstr *s) {
  free(s->s);
  s->s = NULL;
}

void st_rstrs_free(st_rstr *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    st_rstr_clear(&v[i]);
  free(v);
}

void st_rsource_clear(st_rsource *s) {
  st_rstr_clear(&s->path);
  st_rstr_clear(&s->dest);
  st_rstr_clear(&s->ref);
}

void st_rlayer_clear(st_rlayer *l) {
  st_rstr_clear(&l->name);
  for (size_t i = 0; i < l->n_sources; i++)
    st_rsource_clear(&l->sources[i]);
  free(l->sources);
  st_rstrs_free(l->deletes, l->n_deletes);
  st_rstrs_free(l->runs, l->n_runs);
  memset(l, 0, sizeof *l);
}

void st_raxis_clear(st_raxis *a) {
  st_rstr_clear(&a->name);
  st_rstrs_free(a->values, a->n_values);
  memset(a, 0, sizeof *a);
}

void st_rexclude_clear(st_rexclude *e) {
  st_rstrs_free(e->keys, e->n);
  st_rstrs_free(e->values, e->n);
  memset(e, 0, sizeof *e);
}

void st_rkv_clear(st_rkv *kv) {
  st_rstr_clear(&kv->key);
  st_rstr_clear(&kv->value);
}

void st_rfile_free(st_rfile *f) {
  if (!f)
    return;
  free(f->display);
  free(f->display_dir);
  free(f->dir);
  free(f->path);
  free(f);
}

void st_recipe_free(st_recipe *r) {
  if (!r)
    return;
  st_rstr_clear(&r->image);
  st_rstr_clear(&r->tag);
  st_rstr_clear(&r->matrix);
  for (size_t i = 0; i < r->n_axes; i++)
    st_raxis_clear(&r->axes[i]);
  free(r->axes);
  for (size_t i = 0; i < r->n_excludes; i++)
    st_rexclude_clear(&r->excludes[i]);
  free(r->excludes);
  for (size_t i = 0; i < r->n_layers; i++)
    st_rlayer_clear(&r->layers[i]);
  free(r->layers);
  for (size_t i = 0; i < r->n_env; i++)
    st_rkv_clear(&r->env[i]);
  free(r->env);
  for (size_t i = 0; i < r->n_labels; i++)
    st_rkv_clear(&r->labels[i]);
  free(r->labels);
  st_rstr_clear(&r->workdir);
  st_rstrs_free(r->entrypoint, r->n_entrypoint);
  for (size_t i = 0; i < r->n_files; i++)
    st_rfile_free(r->files[i]);
  free(r->files);
  free(r);
}

/* ---- tree helpers ---- */

typedef struct {
  const char *key;
  st_rnode_kind kind;
} keyspec;

static st_rpos npos(const st_rfile *f, const st_rnode *n) {
  return (st_rpos){f, n->loc};
}

/* "a string", "a sequence", "a mapping" or "an empty value". */
static const char *desc(const st_rnode *n) {
  if (n->kind == ST_RN_SCALAR && !n->str[0])
    return "an empty value";
  return n->kind == ST_RN_SCALAR ? "a string" : n->kind == ST_RN_SEQ ? "a sequence" : "a mapping";
}

static int want(const st_rfile *f, const st_rnode *n, st_rnode_kind kind, const char *what,
                st_error *err) {
  if (n->kind == kind)
    return 0;
  return st_rerr(err, ST_EFORMAT, npos(f, n), "%s must be a %s, not %s", what,
                 st_rnode_kind_name(kind), desc(n));
}

static int max_entries(const st_rfile *f, const st_rnode *n, st_error *err) {
  size_t count = n->kind == ST_RN_MAP ? n->n / 2 : n->n;
  if (count <= ST_RECIPE_MAX_LIST)
    return 0;
  return st_rerr(err, ST_EFORMAT, npos(f, n), "more than %d entries in one list or mapping",
                 ST_RECIPE_MAX_LIST);
}

/* Matches the keys of map against ks: vals[i]/keys[i] get the value/key node of ks[i].key
 * (NULL when absent). Unknown keys and values of the wrong kind are errors. */
static int fields(const st_rfile *f, const st_rnode *map, const char *where, const keyspec *ks,
                  size_t nk, const st_rnode **vals, const st_rnode **keys, st_error *err) {
  for (size_t i = 0; i < nk; i++)
    vals[i] = keys[i] = NULL;
  for (size_t e = 0; e + 1 < map->n; e += 2) {
    const st_rnode *k = map->kids[e], *v = map->kids[e + 1];
    size_t i = 0;
    while (i < nk && strcmp(ks[i].key, k->str))
      i++;
    if (i == nk) {
      char expected[256] = "";
      for (size_t j = 0; j < nk; j++)
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s%s",
                 j ? ", " : "", ks[j].key);
      return st_rerr(err, ST_EFORMAT, npos(f, k), "unknown key '%.64s' in %s (expected: %s)",
                     k->str, where, expected);
    }
    char what[96];
    snprintf(what, sizeof what, "'%s'", ks[i].key);
    int rc = want(f, v, ks[i].kind, what, err);
    if (rc < 0)
      return rc;
    vals[i] = v;
    keys[i] = k;
  }
  return 0;
}

static int rstr_set(st_rstr *dst, const st_rfile *f, const st_rnode *n, st_error *err) {
  char *s = strdup(n->str);
  if (!s)
    return st_room(err);
  free(dst->s);
  dst->s = s;
  dst->pos = npos(f, n);
  return 0;
}

/* A sequence of strings into a fresh array. */
static int rstrs_set(st_rstr **out, size_t *n_out, const st_rfile *f, const st_rnode *seq,
                     const char *what, st_error *err) {
  int rc = max_entries(f, seq, err);
  if (rc < 0)
    return rc;
  st_rstr *v = seq->n ? calloc(seq->n, sizeof *v) : NULL;
  if (seq->n && !v)
    return st_room(err);
  for (size_t i = 0; i < seq->n; i++) {
    rc = want(f, seq->kids[i], ST_RN_SCALAR, what, err);
    if (rc == 0)
      rc = rstr_set(&v[i], f, seq->kids[i], err);
    if (rc < 0) {
      st_rstrs_free(v, seq->n);
      return rc;
    }
  }
  *out = v;
  *n_out = seq->n;
  return 0;
}

static bool all_digits(const char *s, size_t min, size_t max) {
  size_t n = strlen(s);
  return n >= min && n <= max && strspn(s, "0123456789") == n;
}

/* True if the path has a ".." component. */
static bool has_dotdot(const char *p) {
  for (const char *c = p; (c = strstr(c, "..")); c += 2)
    if ((c == p || c[-1] == '/') && (c[2] == '\0' || c[2] == '/'))
      return true;
  return false;
}

static int abs_path_check(const st_rstr *s, const char *what, st_error *err) {
  if (s->s[0] != '/')
    return st_rerr(err, ST_EFORMAT, s->pos, "%s must be an absolute path, not '%.64s'", what,
                   s->s);
  if (has_dotdot(s->s))
    return st_rerr(err, ST_EFORMAT, s->pos, "%s must not contain '..': '%.64s'", what, s->s);
  return 0;
}

/* ---- sources and layers ---- */

static const char *const kind_keys[] = {"dir", "archive", "deb", "file", "oci"};
#define N_KINDS 5
/* Indexes of the option keys in parse_source's table, after the kinds. */
enum { K_DEST = N_KINDS, K_STRIP, K_MODE, K_OWNER, K_REF };

static int parse_owner(st_rsource *src, const st_rfile *f, const st_rnode *v, st_error *err) {
  if (!strcmp(v->str, "source")) {
    src->owner = ST_ROWNER_SOURCE;
    return 0;
  }
  const char *colon = strchr(v->str, ':');
  size_t ulen = colon ? (size_t)(colon - v->str) : 0;
  unsigned long long uid = 0, gid = 0;
  bool ok = ulen >= 1 && ulen <= 10 && strspn(v->str, "0123456789") == ulen &&
            all_digits(colon + 1, 1, 10);
  if (ok) {
    uid = strtoull(v->str, NULL, 10);
    gid = strtoull(colon + 1, NULL, 10);
    ok = uid < UINT32_MAX && gid < UINT32_MAX;
  }
  if (!ok)
    return st_rerr(err, ST_EFORMAT, npos(f, v),
                   "owner must be \"UID:GID\" (numbers) or \"source\", not '%.64s'", v->str);
  src->owner = ST_ROWNER_IDS;
  src->uid = (uint32_t)uid;
  src->gid = (uint32_t)gid;
  return 0;
}

/* strip, mode and owner: each allowed on some kinds only. */
static int parse_source_options(st_rsource *src, const st_rfile *f, const st_rnode **v,
                                const st_rnode **k, st_error *err) {
  const char *kind = kind_keys[src->kind];
  if (v[K_STRIP]) { /* strip */
    if (src->kind != ST_SOURCE_ARCHIVE)
      return st_rerr(err, ST_EFORMAT, npos(f, k[K_STRIP]),
                     "'strip' only applies to archive sources, not %s", kind);
    if (!all_digits(v[K_STRIP]->str, 1, 3) || atoi(v[K_STRIP]->str) > 255)
      return st_rerr(err, ST_EFORMAT, npos(f, v[K_STRIP]),
                     "strip must be a non-negative integer (0-255), not '%.64s'", v[K_STRIP]->str);
    src->strip = atoi(v[K_STRIP]->str);
  }
  if (v[K_MODE]) { /* mode */
    if (src->kind != ST_SOURCE_FILE)
      return st_rerr(err, ST_EFORMAT, npos(f, k[K_MODE]),
                     "'mode' only applies to file sources, not %s", kind);
    size_t n = strlen(v[K_MODE]->str);
    if (n < 3 || n > 4 || strspn(v[K_MODE]->str, "01234567") != n)
      return st_rerr(err, ST_EFORMAT, npos(f, v[K_MODE]),
                     "mode must be an octal string of 3 or 4 digits like \"0755\", not '%.64s'",
                     v[K_MODE]->str);
    src->mode = (int)strtol(v[K_MODE]->str, NULL, 8);
  }
  if (v[K_REF]) {
    if (src->kind != ST_SOURCE_OCI)
      return st_rerr(err, ST_EFORMAT, npos(f, k[K_REF]),
                     "'ref' only applies to oci sources, not %s", kind);
    if (!v[K_REF]->str[0])
      return st_rerr(err, ST_EFORMAT, npos(f, v[K_REF]), "ref: empty name");
    int rc = rstr_set(&src->ref, f, v[K_REF], err);
    if (rc < 0)
      return rc;
  }
  if (v[K_OWNER]) { /* owner */
    if (src->kind != ST_SOURCE_DIR && src->kind != ST_SOURCE_FILE)
      return st_rerr(err, ST_EFORMAT, npos(f, k[K_OWNER]),
                     "'owner' only applies to dir and file sources, not %s", kind);
    return parse_owner(src, f, v[K_OWNER], err);
  }
  return 0;
}

static int parse_source(st_rsource *src, const st_rfile *f, const st_rnode *n, st_error *err) {
  static const keyspec ks[] = {
      {"dir", ST_RN_SCALAR},  {"archive", ST_RN_SCALAR}, {"deb", ST_RN_SCALAR},
      {"file", ST_RN_SCALAR}, {"oci", ST_RN_SCALAR},     {"dest", ST_RN_SCALAR},
      {"strip", ST_RN_SCALAR}, {"mode", ST_RN_SCALAR},   {"owner", ST_RN_SCALAR},
      {"ref", ST_RN_SCALAR},
  };
  const st_rnode *v[ST_ARRAY_SIZE(ks)], *k[ST_ARRAY_SIZE(ks)];
  int rc = want(f, n, ST_RN_MAP, "a source", err);
  if (rc == 0)
    rc = fields(f, n, "a source", ks, ST_ARRAY_SIZE(ks), v, k, err);
  if (rc < 0)
    return rc;
  src->strip = src->mode = -1;
  int kind = -1;
  for (int i = 0; i < N_KINDS; i++) {
    if (!v[i])
      continue;
    if (kind >= 0)
      return st_rerr(err, ST_EFORMAT, npos(f, k[i]),
                     "a source has exactly one of dir, archive, deb, file, oci; this one has '%s' "
                     "and '%s'", kind_keys[kind], kind_keys[i]);
    kind = i;
  }
  if (kind < 0)
    return st_rerr(err, ST_EFORMAT, npos(f, n),
                   "a source needs one of dir, archive, deb, file, oci");
  src->kind = (st_source_kind)kind;
  if (!v[kind]->str[0])
    return st_rerr(err, ST_EFORMAT, npos(f, v[kind]), "%s: empty path", kind_keys[kind]);
  rc = rstr_set(&src->path, f, v[kind], err);
  if (rc == 0)
    src->path.pos = npos(f, k[kind]);
  if (rc == 0 && v[K_DEST])
    rc = rstr_set(&src->dest, f, v[K_DEST], err);
  if (rc == 0 && v[K_DEST])
    rc = abs_path_check(&src->dest, "dest", err);
  if (rc < 0)
    return rc;
  return parse_source_options(src, f, v, k, err);
}

static bool layer_name_ok(const char *s) {
  size_t n = strlen(s);
  return n >= 1 && n <= 64 && strchr("_.-", s[0]) == NULL &&
         strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

static int parse_layer_lists(st_rlayer *l, const st_rfile *f, const st_rnode **v,
                             st_error *err) {
  int rc = v[1] ? max_entries(f, v[1], err) : 0;
  if (rc == 0 && v[1]) {
    l->sources = v[1]->n ? calloc(v[1]->n, sizeof *l->sources) : NULL;
    if (v[1]->n && !l->sources)
      return st_room(err);
    for (size_t i = 0; i < v[1]->n && rc == 0; i++, l->n_sources++)
      rc = parse_source(&l->sources[i], f, v[1]->kids[i], err);
  }
  if (rc == 0 && v[2])
    rc = rstrs_set(&l->deletes, &l->n_deletes, f, v[2], "a delete entry", err);
  for (size_t i = 0; rc == 0 && i < l->n_deletes; i++) {
    rc = abs_path_check(&l->deletes[i], "delete", err);
    if (rc == 0 && l->deletes[i].s[strspn(l->deletes[i].s, "/")] == '\0')
      rc = st_rerr(err, ST_EFORMAT, l->deletes[i].pos, "delete: cannot delete '/'");
  }
  if (rc == 0 && v[3])
    rc = rstrs_set(&l->runs, &l->n_runs, f, v[3], "a run command", err);
  for (size_t i = 0; rc == 0 && i < l->n_runs; i++)
    if (l->runs[i].s[strspn(l->runs[i].s, " \t\n")] == '\0')
      rc = st_rerr(err, ST_EFORMAT, l->runs[i].pos, "run: empty command");
  return rc;
}

static int parse_layer(st_rlayer *l, const st_rfile *f, const st_rnode *n, st_error *err) {
  static const keyspec ks[] = {
      {"name", ST_RN_SCALAR}, {"sources", ST_RN_SEQ}, {"delete", ST_RN_SEQ}, {"run", ST_RN_SEQ}};
  const st_rnode *v[4], *k[4];
  int rc = want(f, n, ST_RN_MAP, "a layer", err);
  if (rc == 0)
    rc = fields(f, n, "a layer", ks, 4, v, k, err);
  if (rc < 0)
    return rc;
  l->pos = npos(f, n);
  if (!v[0])
    return st_rerr(err, ST_EFORMAT, l->pos, "missing required key 'name' in a layer");
  if (!layer_name_ok(v[0]->str))
    return st_rerr(err, ST_EFORMAT, npos(f, v[0]),
                   "layer name must be 1-64 of [A-Za-z0-9._-], not starting with . _ or -: "
                   "'%.64s'", v[0]->str);
  rc = rstr_set(&l->name, f, v[0], err);
  if (rc == 0)
    rc = parse_layer_lists(l, f, v, err);
  if (rc == 0 && l->n_sources + l->n_deletes + l->n_runs == 0)
    rc = st_rerr(err, ST_EFORMAT, l->pos,
                 "layer '%.64s' is empty: give at least one of sources, run, delete", l->name.s);
  return rc;
}

static int parse_layers(st_recipe *r, const st_rfile *f, const st_rnode *seq, st_error *err) {
  if (seq->n == 0)
    return st_rerr(err, ST_EFORMAT, npos(f, seq), "layers is empty");
  if (seq->n > ST_RECIPE_MAX_LAYERS)
    return st_rerr(err, ST_EFORMAT, npos(f, seq), "more than %d layers", ST_RECIPE_MAX_LAYERS);
  r->layers = calloc(seq->n, sizeof *r->layers);
  if (!r->layers)
    return st_room(err);
  r->has_layers = true;
  for (size_t i = 0; i < seq->n; i++) {
    int rc = parse_layer(&r->layers[i], f, seq->kids[i], err);
    r->n_layers++;
    if (rc < 0)
      return rc;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(r->layers[j].name.s, r->layers[i].name.s))
        return st_rerr(err, ST_EFORMAT, r->layers[i].name.pos,
                       "duplicate layer name '%.64s' (first at line %d)", r->layers[i].name.s,
                       r->layers[j].name.pos.loc.line);
  }
  return 0;
}

/* ---- matrix ---- */

static bool axis_value_ok(const char *s) {
  if (!*s)
    return false;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c <= ' ' || *c == ',' || *c == '=' || *c == '$' || *c == 0x7f)
      return false;
  return true;
}

static int parse_axis(st_raxis *a, const st_rfile *f, const st_rnode *k, const st_rnode *v,
                      st_error *err) {
  if (!st_rvar_name_ok(k->str))
    return st_rerr(err, ST_EFORMAT, npos(f, k),
                   "axis name '%.64s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", k->str);
  int rc = want(f, v, ST_RN_SEQ, "a matrix axis", err);
  if (rc < 0)
    return rc;
  if (v->n == 0)
    return st_rerr(err, ST_EFORMAT, npos(f, v), "matrix axis '%.64s' has no values", k->str);
  if (v->n > ST_RECIPE_MAX_COMBOS)
    return st_rerr(err, ST_EFORMAT, npos(f, v), "matrix axis '%.64s' has more than %d values",
                   k->str, ST_RECIPE_MAX_COMBOS);
  rc = rstr_set(&a->name, f, k, err);
  if (rc == 0)
    rc = rstrs_set(&a->values, &a->n_values, f, v, "a matrix value", err);
  for (size_t i = 0; rc == 0 && i < a->n_values; i++) {
    const st_rstr *x = &a->values[i];
    if (!axis_value_ok(x->s))
      return st_rerr(err, ST_EFORMAT, x->pos,
                     "matrix value '%.64s' must be non-empty, without spaces, ',', '=' or '$'",
                     x->s);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(a->values[j].s, x->s))
        return st_rerr(err, ST_EFORMAT, x->pos, "duplicate value '%.64s' in axis '%.64s'",
                       x->s, a->name.s);
  }
  return rc;
}

static int parse_exclude(st_rexclude *e, const st_rfile *f, const st_rnode *n, st_error *err) {
  int rc = want(f, n, ST_RN_MAP, "an exclude entry", err);
  if (rc < 0)
    return rc;
  e->pos = npos(f, n);
  if (n->n == 0)
    return st_rerr(err, ST_EFORMAT, e->pos, "exclude entry is empty (it would exclude every cell)");
  size_t m = n->n / 2;
  e->keys = calloc(m, sizeof *e->keys);
  e->values = calloc(m, sizeof *e->values);
  if (!e->keys || !e->values)
    return st_room(err);
  e->n = m;
  for (size_t i = 0; i < m && rc == 0; i++) {
    rc = want(f, n->kids[2 * i + 1], ST_RN_SCALAR, "an exclude value", err);
    if (rc == 0)
      rc = rstr_set(&e->keys[i], f, n->kids[2 * i], err);
    if (rc == 0)
      rc = rstr_set(&e->values[i], f, n->kids[2 * i + 1], err);
  }
  return rc;
}

static int parse_excludes(st_recipe *r, const st_rfile *f, const st_rnode *k,
                          const st_rnode *v, st_error *err) {
  bool scalars = v->kind == ST_RN_SEQ && v->n > 0;
  for (size_t i = 0; scalars && i < v->n; i++)
    scalars = v->kids[i]->kind == ST_RN_SCALAR;
  if (scalars)
    return st_rerr(err, ST_EFORMAT, npos(f, k),
                   "a matrix axis cannot be named 'exclude' (the key holds the list of "
                   "excluded combinations)");
  int rc = want(f, v, ST_RN_SEQ, "'exclude'", err);
  if (rc == 0)
    rc = max_entries(f, v, err);
  if (rc < 0 || v->n == 0)
    return rc;
  r->excludes = calloc(v->n, sizeof *r->excludes);
  if (!r->excludes)
    return st_room(err);
  for (size_t i = 0; i < v->n && rc == 0; i++, r->n_excludes++)
    rc = parse_exclude(&r->excludes[i], f, v->kids[i], err);
  return rc;
}

static int parse_matrix(st_recipe *r, const st_rfile *f, const st_rnode *k, const st_rnode *m,
                        st_error *err) {
  int rc = rstr_set(&r->matrix, f, k, err);
  if (rc < 0)
    return rc;
  size_t n = m->n / 2;
  r->axes = n ? calloc(n, sizeof *r->axes) : NULL;
  if (n && !r->axes)
    return st_room(err);
  bool has_exclude = false;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const st_rnode *key = m->kids[2 * i], *val = m->kids[2 * i + 1];
    if (!strcmp(key->str, "exclude")) {
      has_exclude = true;
      rc = parse_excludes(r, f, key, val, err);
    } else {
      rc = parse_axis(&r->axes[r->n_axes++], f, key, val, err);
    }
  }
  if (rc == 0 && r->n_axes == 0 && !has_exclude)
    rc = st_rerr(err, ST_EFORMAT, npos(f, m), "matrix has no axes");
  return rc;
}

/* ---- config ---- */

static bool label_key_ok(const char *s) {
  size_t n = strlen(s);
  return n >= 1 && n <= 128 &&
         strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-") == n;
}

static int parse_kvs(st_rkv **out, size_t *n_out, const st_rfile *f, const st_rnode *m,
                     const char *what, bool (*key_ok)(const char *), st_error *err) {
  size_t n = m->n / 2;
  int rc = max_entries(f, m, err);
  if (rc < 0)
    return rc;
  st_rkv *kv = n ? calloc(n, sizeof *kv) : NULL;
  if (n && !kv)
    return st_room(err);
  *out = kv;
  for (size_t i = 0; i < n && rc == 0; i++, (*n_out)++) {
    const st_rnode *k = m->kids[2 * i], *v = m->kids[2 * i + 1];
    if (!key_ok(k->str))
      rc = st_rerr(err, ST_EFORMAT, npos(f, k), "%s name '%.64s' is not valid", what, k->str);
    if (rc == 0)
      rc = want(f, v, ST_RN_SCALAR, what, err);
    if (rc == 0)
      rc = rstr_set(&kv[i].key, f, k, err);
    if (rc == 0)
      rc = rstr_set(&kv[i].value, f, v, err);
  }
  return rc;
}

static int parse_config(st_recipe *r, const st_rfile *f, const st_rnode *n, st_error *err) {
  static const keyspec ks[] = {{"env", ST_RN_MAP},
                               {"workdir", ST_RN_SCALAR},
                               {"entrypoint", ST_RN_SEQ},
                               {"labels", ST_RN_MAP}};
  const st_rnode *v[4], *k[4];
  int rc = fields(f, n, "config", ks, 4, v, k, err);
  if (rc == 0 && v[0])
    rc = parse_kvs(&r->env, &r->n_env, f, v[0], "env", st_rvar_name_ok, err);
  if (rc == 0 && v[1])
    rc = rstr_set(&r->workdir, f, v[1], err);
  if (rc == 0 && v[1])
    rc = abs_path_check(&r->workdir, "workdir", err);
  if (rc == 0 && v[2]) {
    r->has_entrypoint = true;
    rc = rstrs_set(&r->entrypoint, &r->n_entrypoint, f, v[2], "an entrypoint item", err);
  }
  if (rc == 0 && v[3])
    rc = parse_kvs(&r->labels, &r->n_labels, f, v[3], "label", label_key_ok, err);
  return rc;
}

int st_rparse_top(st_recipe *r, st_rstr *extends, const st_rfile *f, const st_rnode *root,
                  st_error *err) {
  if (!root)
    return st_rerr(err, ST_EFORMAT, (st_rpos){f, {1, 1}}, "empty recipe (expected a mapping)");
  if (root->kind != ST_RN_MAP)
    return st_rerr(err, ST_EFORMAT, npos(f, root), "a recipe must be a mapping, not %s",
                   desc(root));
  r->top = npos(f, root);
  static const keyspec ks[] = {
      {"extends", ST_RN_SCALAR}, {"image", ST_RN_SCALAR}, {"tag", ST_RN_SCALAR},
      {"matrix", ST_RN_MAP},     {"layers", ST_RN_SEQ},   {"config", ST_RN_MAP},
  };
  const st_rnode *v[6], *k[6];
  int rc = fields(f, root, "the recipe", ks, 6, v, k, err);
  if (rc == 0 && v[0]) {
    if (!v[0]->str[0])
      return st_rerr(err, ST_EFORMAT, npos(f, v[0]), "extends: empty path");
    rc = rstr_set(extends, f, v[0], err);
    if (rc == 0)
      extends->pos = npos(f, k[0]);
  }
  if (rc == 0 && v[1])
    rc = rstr_set(&r->image, f, v[1], err);
  if (rc == 0 && v[2])
    rc = rstr_set(&r->tag, f, v[2], err);
  if (rc == 0 && v[3])
    rc = parse_matrix(r, f, k[3], v[3], err);
  if (rc == 0 && v[4])
    rc = parse_layers(r, f, v[4], err);
  if (rc == 0 && v[5])
    rc = parse_config(r, f, v[5], err);
  return rc;
}
