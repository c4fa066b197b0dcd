/* SPDX-License-Identifier: Apache-2.0 */
/* Recipe matrix and variables: ${name} substitution, the cells of a matrix (cartesian
 * product minus exclusions), --cell filters, and the whole-recipe checks that need the
 * merged recipe (required keys, limits, variables, the tag of every cell). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "recipe-private.h"

bool st_rvar_name_ok(const char *name) {
  if (!((*name >= 'A' && *name <= 'Z') || (*name >= 'a' && *name <= 'z') || *name == '_'))
    return false;
  size_t n = strlen(name);
  return n <= 64 &&
         strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == n;
}

bool st_rtag_ok(const char *tag) {
  size_t n = strlen(tag);
  return n >= 1 && n <= 128 && tag[0] != '.' && tag[0] != '-' &&
         strspn(tag, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

/* Image names: components of [a-z0-9][a-z0-9._-]* separated by single slashes. */
static bool image_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 255)
    return false;
  for (const char *c = s; *c;) {
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')))
      return false;
    c += strspn(c, "abcdefghijklmnopqrstuvwxyz0123456789._-");
    if (*c == '/')
      c++;
    else if (*c)
      return false;
    else if (c[-1] == '/')
      return false;
  }
  return s[n - 1] != '/';
}

/* ---- substitution ---- */

typedef struct {
  char *p;
  size_t n, cap;
  bool too_long;
} sbuf;

static bool sbuf_add(sbuf *b, const char *s, size_t n) {
  if (b->n + n > ST_RECIPE_MAX_STRING) {
    b->too_long = true;
    return false;
  }
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
      return false;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
  return true;
}

static const char *cell_lookup(const st_cell *c, const char *name, size_t len) {
  for (size_t i = 0; c && i < c->n; i++)
    if (strlen(c->names[i]) == len && !memcmp(c->names[i], name, len))
      return c->values[i];
  return NULL;
}

static int subst_var(sbuf *b, const char **pp, const st_rstr *s, const st_cell *cell,
                     st_error *err) {
  const char *start = *pp + 2, *close = strchr(start, '}');
  if (!close)
    return st_rerr(err, ST_EFORMAT, s->pos, "unterminated '${' in '%.64s' (write $$ for a $)",
                   s->s);
  size_t len = (size_t)(close - start);
  char name[80];
  snprintf(name, sizeof name, "%.*s", (int)(len < 70 ? len : 70), start);
  if (len == 0 || len > 64 || !st_rvar_name_ok(name))
    return st_rerr(err, ST_EFORMAT, s->pos, "malformed variable '${%.64s}' in '%.64s'", name,
                   s->s);
  const char *v = cell_lookup(cell, start, len);
  if (!v)
    return st_rerr(err, ST_EFORMAT, s->pos, "undefined variable '${%s}'%s", name,
                   cell && cell->n ? "" : " (the recipe has no matrix)");
  if (!sbuf_add(b, v, strlen(v)))
    return -1;
  *pp = close + 1;
  return 0;
}

int st_rsubst(char **out, const st_rstr *s, const st_cell *cell, st_error *err) {
  sbuf b = {0};
  int rc = sbuf_add(&b, "", 0) ? 0 : -1;
  for (const char *p = s->s; rc == 0 && *p;) {
    if (p[0] == '$' && p[1] == '{') {
      rc = subst_var(&b, &p, s, cell, err);
      continue;
    }
    size_t n = p[0] == '$' ? 1 : strcspn(p, "$");
    if (!sbuf_add(&b, p, n))
      rc = -1;
    p += p[0] == '$' && p[1] == '$' ? 2 : n;
  }
  if (rc == -1)
    rc = b.too_long
             ? st_rerr(err, ST_EFORMAT, s->pos, "longer than %d bytes after substitution",
                       ST_RECIPE_MAX_STRING)
             : st_room(err);
  if (rc < 0) {
    free(b.p);
    return rc;
  }
  *out = b.p;
  return 0;
}

/* ---- cells ---- */

void st_cells_free(st_cell *cells, size_t n) {
  for (size_t i = 0; cells && i < n; i++) {
    for (size_t j = 0; j < cells[i].n; j++) {
      free(cells[i].names[j]);
      free(cells[i].values[j]);
    }
    free(cells[i].names);
    free(cells[i].values);
  }
  free(cells);
}

char *st_cell_name(const st_cell *c) {
  sbuf b = {0};
  bool ok = sbuf_add(&b, "", 0);
  for (size_t i = 0; ok && i < c->n; i++)
    ok = (!i || sbuf_add(&b, ",", 1)) && sbuf_add(&b, c->names[i], strlen(c->names[i])) &&
         sbuf_add(&b, "=", 1) && sbuf_add(&b, c->values[i], strlen(c->values[i]));
  if (!ok) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

static int cell_fill(st_cell *c, const st_recipe *r, const size_t *idx) {
  c->names = calloc(r->n_axes ? r->n_axes : 1, sizeof *c->names);
  c->values = calloc(r->n_axes ? r->n_axes : 1, sizeof *c->values);
  if (!c->names || !c->values)
    return -1;
  for (size_t a = 0; a < r->n_axes; a++, c->n++) {
    c->names[a] = strdup(r->axes[a].name.s);
    c->values[a] = strdup(r->axes[a].values[idx[a]].s);
    if (!c->names[a] || !c->values[a]) {
      c->n++;
      return -1;
    }
  }
  return 0;
}

/* For each exclude entry and key: the axis index and the value index in it (value -1 when
 * the value is not in the axis: an inherited entry that can no longer match). */
static int exclude_index(const st_recipe *r, size_t **out) {
  size_t total = 0;
  for (size_t e = 0; e < r->n_excludes; e++)
    total += r->excludes[e].n;
  size_t *ix = calloc(total * 2 + 1, sizeof *ix);
  if (!ix)
    return -1;
  size_t *p = ix;
  for (size_t e = 0; e < r->n_excludes; e++) {
    const st_rexclude *x = &r->excludes[e];
    for (size_t k = 0; k < x->n; k++, p += 2) {
      p[0] = p[1] = SIZE_MAX;
      for (size_t a = 0; a < r->n_axes; a++)
        if (!strcmp(r->axes[a].name.s, x->keys[k].s))
          p[0] = a;
      for (size_t v = 0; p[0] != SIZE_MAX && v < r->axes[p[0]].n_values; v++)
        if (!strcmp(r->axes[p[0]].values[v].s, x->values[k].s))
          p[1] = v;
    }
  }
  *out = ix;
  return 0;
}

static bool excluded(const st_recipe *r, const size_t *ix, const size_t *idx) {
  const size_t *p = ix;
  for (size_t e = 0; e < r->n_excludes; e++) {
    bool all = true;
    for (size_t k = 0; k < r->excludes[e].n; k++, p += 2)
      if (p[0] == SIZE_MAX || p[1] != idx[p[0]])
        all = false;
    if (all)
      return true;
  }
  return false;
}

/* Cells without the limit checks on the count after exclusions (callers check). */
static int compute_cells(const st_recipe *r, st_cell **cells_out, size_t *n_out,
                         st_error *err) {
  if (r->n_axes > ST_RECIPE_MAX_AXES)
    return st_rerr(err, ST_EFORMAT, r->matrix.pos, "more than %d matrix axes",
                   ST_RECIPE_MAX_AXES);
  size_t combos = 1;
  for (size_t a = 0; a < r->n_axes; a++) {
    combos *= r->axes[a].n_values;
    if (combos > ST_RECIPE_MAX_COMBOS)
      return st_rerr(err, ST_EFORMAT, r->matrix.pos,
                     "matrix has more than %d combinations before exclusions",
                     ST_RECIPE_MAX_COMBOS);
  }
  _cleanup_free_ size_t *ix = NULL;
  size_t idx[ST_RECIPE_MAX_AXES + 1] = {0};
  st_cell *cells = calloc(combos, sizeof *cells);
  if (!cells || exclude_index(r, &ix) < 0) {
    free(cells);
    return st_room(err);
  }
  size_t n = 0;
  for (size_t i = 0; i < combos; i++) {
    if (!excluded(r, ix, idx) && cell_fill(&cells[n++], r, idx) < 0) {
      st_cells_free(cells, n);
      return st_room(err);
    }
    for (size_t a = r->n_axes; a-- > 0;) { /* odometer: the last axis moves fastest */
      if (++idx[a] < r->axes[a].n_values)
        break;
      idx[a] = 0;
    }
  }
  *cells_out = cells;
  *n_out = n;
  return 0;
}

int st_recipe_cells(const st_recipe *r, st_cell **cells_out, size_t *n_out, st_error *err) {
  return compute_cells(r, cells_out, n_out, err);
}

/* ---- --cell filters ---- */

struct st_cell_filter {
  size_t n;
  char **keys;
  char **values;
};

void st_cell_filter_free(st_cell_filter *f) {
  if (!f)
    return;
  for (size_t i = 0; i < f->n; i++) {
    free(f->keys[i]);
    free(f->values[i]);
  }
  free(f->keys);
  free(f->values);
  free(f);
}
ST_DEFINE_FREEP(st_cell_filter, st_cell_filter_free)

static void list_names(char *buf, size_t size, const st_rstr *v, size_t stride, size_t n) {
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    const st_rstr *s = (const st_rstr *)((const char *)v + i * stride);
    snprintf(buf + strlen(buf), size - strlen(buf), "%s%.32s", i ? ", " : "", s->s);
  }
}

static int filter_pair(st_cell_filter *f, const st_recipe *r, const char *item, st_error *err) {
  const char *eq = strchr(item, '=');
  if (!eq || eq == item)
    return st_error_set(err, ST_EINVAL, "--cell: expected AXIS=VALUE, got '%.64s'", item);
  char list[512];
  const st_raxis *a = NULL;
  for (size_t i = 0; i < r->n_axes && !a; i++)
    if (strlen(r->axes[i].name.s) == (size_t)(eq - item) &&
        !memcmp(r->axes[i].name.s, item, (size_t)(eq - item)))
      a = &r->axes[i];
  if (!a) {
    list_names(list, sizeof list, r->n_axes ? &r->axes[0].name : NULL, sizeof *r->axes,
               r->n_axes);
    return st_error_set(err, ST_EINVAL, "--cell: unknown axis '%.*s' (%s%s)",
                        (int)(eq - item > 64 ? 64 : eq - item), item,
                        r->n_axes ? "axes: " : "the recipe has no matrix", list);
  }
  size_t v = 0;
  while (v < a->n_values && strcmp(a->values[v].s, eq + 1))
    v++;
  if (v == a->n_values) {
    list_names(list, sizeof list, a->values, sizeof *a->values, a->n_values);
    return st_error_set(err, ST_EINVAL, "--cell: value '%.64s' is not in axis '%s' (values: %s)",
                        eq + 1, a->name.s, list);
  }
  f->keys[f->n] = strdup(a->name.s);
  f->values[f->n] = strdup(a->values[v].s);
  f->n++;
  return f->keys[f->n - 1] && f->values[f->n - 1] ? 0 : st_room(err);
}

int st_recipe_cell_filter_parse(const st_recipe *r, const char *spec, st_cell_filter **out,
                                st_error *err) {
  if (!spec || !*spec)
    return st_error_set(err, ST_EINVAL, "--cell: empty filter");
  size_t items = 1;
  for (const char *c = spec; *c; c++)
    items += *c == ',';
  _cleanup_(st_cell_filter_freep) st_cell_filter *f = calloc(1, sizeof *f);
  _cleanup_free_ char *copy = strdup(spec);
  if (!f || !copy || !(f->keys = calloc(items, sizeof *f->keys)) ||
      !(f->values = calloc(items, sizeof *f->values)))
    return st_room(err);
  for (char *it = copy, *next; it; it = next) {
    next = strchr(it, ',');
    if (next)
      *next++ = '\0';
    int rc = filter_pair(f, r, it, err);
    if (rc < 0)
      return rc;
  }
  *out = ST_TAKE_PTR(f);
  return 0;
}

bool st_cell_matches(const st_cell_filter *f, const st_cell *c) {
  if (!f)
    return true;
  for (size_t i = 0; i < f->n; i++) {
    const char *have = cell_lookup(c, f->keys[i], strlen(f->keys[i]));
    bool any = false;
    for (size_t j = 0; j < f->n && !any; j++)
      any = !strcmp(f->keys[j], f->keys[i]) && have && !strcmp(have, f->values[j]);
    if (!any)
      return false;
  }
  return true;
}

/* ---- whole-recipe validation ---- */

static int check_one(const st_rstr *s, const st_cell *cell, st_error *err) {
  char *out = NULL;
  int rc = st_rsubst(&out, s, cell, err);
  free(out);
  return rc;
}

/* Every string that takes variables parses and names defined variables only. */
static int check_strings(const st_recipe *r, const st_cell *cell, st_error *err) {
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < r->n_layers; i++) {
    const st_rlayer *l = &r->layers[i];
    for (size_t j = 0; rc == 0 && j < l->n_sources; j++) {
      rc = check_one(&l->sources[j].path, cell, err);
      if (rc == 0 && l->sources[j].dest.s)
        rc = check_one(&l->sources[j].dest, cell, err);
    }
    for (size_t j = 0; rc == 0 && j < l->n_deletes; j++)
      rc = check_one(&l->deletes[j], cell, err);
    for (size_t j = 0; rc == 0 && j < l->n_runs; j++)
      rc = check_one(&l->runs[j], cell, err);
  }
  for (size_t i = 0; rc == 0 && i < r->n_env; i++)
    rc = check_one(&r->env[i].value, cell, err);
  for (size_t i = 0; rc == 0 && i < r->n_labels; i++)
    rc = check_one(&r->labels[i].value, cell, err);
  if (rc == 0 && r->workdir.s)
    rc = check_one(&r->workdir, cell, err);
  for (size_t i = 0; rc == 0 && i < r->n_entrypoint; i++)
    rc = check_one(&r->entrypoint[i], cell, err);
  return rc;
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The tag of every cell is valid, and no two cells share a tag. */
static int check_tags(const st_recipe *r, const st_cell *cells, size_t n, st_error *err) {
  st_rstr latest = {"latest", r->top};
  const st_rstr *tag = r->tag.s ? &r->tag : &latest;
  char **tags = calloc(n, sizeof *tags);
  if (!tags)
    return st_room(err);
  int rc = 0;
  size_t done = 0;
  for (; rc == 0 && done < n; done++) {
    rc = st_rsubst(&tags[done], tag, &cells[done], err);
    if (rc == 0 && !st_rtag_ok(tags[done]))
      rc = st_rerr(err, ST_EFORMAT, tag->pos,
                   "tag '%.64s' is not valid ([A-Za-z0-9_][A-Za-z0-9._-]{0,127})", tags[done]);
  }
  if (rc == 0) {
    qsort(tags, n, sizeof *tags, str_cmp);
    for (size_t i = 1; rc == 0 && i < n; i++)
      if (!strcmp(tags[i - 1], tags[i]))
        rc = st_rerr(err, ST_EFORMAT, tag->pos,
                     "two cells get the same tag '%.64s' (use every matrix variable in tag)",
                     tags[i]);
  }
  for (size_t i = 0; i < done; i++)
    free(tags[i]);
  free(tags);
  return rc;
}

int st_recipe_validate(const st_recipe *r, st_error *err) {
  if (!r->image.s)
    return st_rerr(err, ST_EFORMAT, r->top, "missing required key 'image'");
  if (!image_ok(r->image.s))
    return st_rerr(err, ST_EFORMAT, r->image.pos,
                   "image name '%.64s' is not valid ([a-z0-9][a-z0-9._-]* separated by /)",
                   r->image.s);
  if (!r->has_layers)
    return st_rerr(err, ST_EFORMAT, r->top, "missing required key 'layers'");
  if (r->n_layers > ST_RECIPE_MAX_LAYERS)
    return st_rerr(err, ST_EFORMAT, r->layers[ST_RECIPE_MAX_LAYERS].pos,
                   "more than %d layers (after extends)", ST_RECIPE_MAX_LAYERS);
  if (r->n_excludes > ST_RECIPE_MAX_LIST)
    return st_rerr(err, ST_EFORMAT, r->excludes[ST_RECIPE_MAX_LIST].pos,
                   "more than %d exclude entries (after extends)", ST_RECIPE_MAX_LIST);
  if (r->n_axes > ST_RECIPE_MAX_AXES)
    return st_rerr(err, ST_EFORMAT, r->axes[ST_RECIPE_MAX_AXES].name.pos,
                   "more than %d matrix axes", ST_RECIPE_MAX_AXES);
  st_cell *cells = NULL;
  size_t n = 0;
  int rc = compute_cells(r, &cells, &n, err);
  if (rc < 0)
    return rc;
  if (n == 0)
    rc = st_rerr(err, ST_EFORMAT, r->matrix.pos, "every cell of the matrix is excluded");
  else if (n > ST_RECIPE_MAX_CELLS)
    rc = st_rerr(err, ST_EFORMAT, r->matrix.pos, "matrix has %zu cells (at most %d)", n,
                 ST_RECIPE_MAX_CELLS);
  if (rc == 0)
    rc = check_strings(r, &cells[0], err);
  if (rc == 0)
    rc = check_tags(r, cells, n, err);
  st_cells_free(cells, n);
  return rc;
}
