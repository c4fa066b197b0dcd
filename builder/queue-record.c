/* SPDX-License-Identifier: Apache-2.0 */
/* Build records and event histories: copies, and the line-based text they are stored as.
 * Strings are escaped (\\, \t, \n) so that every field stays on its line. */
#include "queue-private.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

#define RECORD_MAGIC "strata-build 1"

/* ---- names ---- */

const char *st_build_state_name(st_build_state s) {
  static const char *const names[] = {"queued", "running", "succeeded", "failed", "cancelled"};
  return (unsigned)s < ST_ARRAY_SIZE(names) ? names[s] : "?";
}

const char *st_layer_state_name(st_layer_state s) {
  static const char *const names[] = {"queued", "running", "cached", "done", "failed"};
  return (unsigned)s < ST_ARRAY_SIZE(names) ? names[s] : "?";
}

bool st_build_state_final(st_build_state s) {
  return s == ST_BUILD_SUCCEEDED || s == ST_BUILD_FAILED || s == ST_BUILD_CANCELLED;
}

/* ---- text hygiene ---- */

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                            : (c & 0xf8) == 0xf0 ? 4 : 0;
  if (len == 0 || len > n || (len == 2 && c < 0xc2) || (len == 4 && c > 0xf4))
    return 0;
  for (size_t i = 1; i < len; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  if (len == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0)))
    return 0; /* overlong, surrogate */
  if (len == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)))
    return 0;
  return len;
}

char *st_bq_clean(const char *text, size_t max) {
  size_t n = strnlen(text, max);
  char *out = malloc(n + 1);
  if (!out)
    return NULL;
  const unsigned char *p = (const unsigned char *)text;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t l = utf8_len(p + i, n - i);
    if (l == 0 || (l == 1 && (p[i] < 0x20 || p[i] == 0x7f))) {
      out[o++] = p[i] == '\t' ? ' ' : '?';
      i++;
    } else {
      memcpy(out + o, p + i, l);
      o += l;
      i += l;
    }
  }
  out[o] = '\0';
  return out;
}

/* ---- copies ---- */

static bool dup_str(char **dst, const char *src) {
  *dst = NULL;
  return !src || (*dst = strdup(src)) != NULL;
}

void st_bevent_clear(st_bevent *ev) {
  free(ev->cell);
  free(ev->layer);
  free(ev->text);
  *ev = (st_bevent){0};
}

void st_bevents_free(st_bevent *v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    st_bevent_clear(&v[i]);
  free(v);
}

int st_bevent_copy(st_bevent *dst, const st_bevent *src) {
  *dst = *src;
  bool ok = dup_str(&dst->cell, src->cell) & dup_str(&dst->layer, src->layer) &
            dup_str(&dst->text, src->text);
  if (!ok) {
    st_bevent_clear(dst);
    return ST_ENOMEM;
  }
  return ST_OK;
}

void st_build_info_clear(st_build_info *info) {
  st_build_request_clear(&info->req);
  free(info->error);
  for (size_t i = 0; i < info->n_images; i++) {
    free(info->images[i].ref);
    free(info->images[i].cell);
  }
  free(info->images);
  *info = (st_build_info){0};
}

void st_build_info_free(st_build_info *info) {
  if (!info)
    return;
  st_build_info_clear(info);
  free(info);
}

void st_build_infos_free(st_build_info **v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    st_build_info_free(v[i]);
  free(v);
}

int st_build_info_copy(st_build_info *dst, const st_build_info *src) {
  *dst = *src;
  dst->req.recipe_name = dst->req.recipe_text = dst->req.cells = NULL;
  dst->error = NULL;
  dst->images = NULL;
  dst->n_images = 0;
  bool ok = dup_str(&dst->req.recipe_name, src->req.recipe_name) &
            dup_str(&dst->req.cells, src->req.cells) & dup_str(&dst->error, src->error);
  if (ok && src->req.recipe_text) {
    dst->req.recipe_text = malloc(src->req.recipe_len + 1);
    ok = dst->req.recipe_text != NULL;
    if (ok)
      memcpy(dst->req.recipe_text, src->req.recipe_text, src->req.recipe_len + 1);
  }
  if (ok && src->n_images) {
    ok = (dst->images = calloc(src->n_images, sizeof *dst->images)) != NULL;
    for (size_t i = 0; ok && i < src->n_images; i++, dst->n_images++) {
      dst->images[i].digest = src->images[i].digest;
      ok = dup_str(&dst->images[i].ref, src->images[i].ref) &
           dup_str(&dst->images[i].cell, src->images[i].cell);
    }
  }
  if (!ok) {
    st_build_info_clear(dst);
    return ST_ENOMEM;
  }
  return ST_OK;
}

/* ---- a growing text buffer ---- */

struct buf {
  char *p;
  size_t len, cap;
  bool oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->p && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap <= b->len + (size_t)n)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

static void put_esc(struct buf *b, const char *s) {
  for (; s && *s; s++) {
    if (*s == '\\')
      put(b, "\\\\");
    else if (*s == '\t')
      put(b, "\\t");
    else if (*s == '\n')
      put(b, "\\n");
    else
      put(b, "%c", *s);
  }
}

static int buf_done(struct buf *b, char **out, size_t *len) {
  if (b->oom || !b->p) {
    free(b->p);
    return ST_ENOMEM;
  }
  *out = b->p;
  *len = b->len;
  return ST_OK;
}

/* Unescapes s in place. */
static void unesc(char *s) {
  char *o = s;
  for (; *s; s++) {
    if (*s == '\\' && s[1]) {
      s++;
      *o++ = *s == 't' ? '\t' : *s == 'n' ? '\n' : *s;
    } else {
      *o++ = *s;
    }
  }
  *o = '\0';
}

/* ---- records ---- */

int st_bq_record_format(const st_build_info *info, char **out, size_t *len) {
  struct buf b = {0};
  char hex[ST_DIGEST_HEX_LEN + 1];
  put(&b, RECORD_MAGIC "\nid sha256:%s\nstate %s\nattempt %" PRIu32 "\nrecipe-name ",
      st_digest_hex(&info->id, hex), st_build_state_name(info->state), info->attempt);
  put_esc(&b, info->req.recipe_name);
  if (info->req.has_context)
    put(&b, "\ncontext sha256:%s", st_digest_hex(&info->req.context, hex));
  if (info->req.cells) {
    put(&b, "\ncells ");
    put_esc(&b, info->req.cells);
  }
  put(&b, "\nmtime %" PRId64 "\nsubmitted %.6f\nstarted %.6f\nfinished %.6f\n", info->req.mtime,
      info->submitted, info->started, info->finished);
  if (info->error) {
    put(&b, "error-code %d\nerror ", info->error_code);
    put_esc(&b, info->error);
    put(&b, "\n");
  }
  for (size_t i = 0; i < info->n_images; i++) {
    put(&b, "image sha256:%s ", st_digest_hex(&info->images[i].digest, hex));
    put_esc(&b, info->images[i].ref);
    put(&b, " ");
    put_esc(&b, info->images[i].cell);
    put(&b, "\n");
  }
  return buf_done(&b, out, len);
}

static int parse_state(const char *v, st_build_state *out) {
  for (int i = 0; i < ST_BUILD_STATE_COUNT; i++)
    if (!strcmp(v, st_build_state_name((st_build_state)i))) {
      *out = (st_build_state)i;
      return 0;
    }
  return -1;
}

static int add_image(st_build_info *info, const char *v) {
  st_build_image *im = realloc(info->images, (info->n_images + 1) * sizeof *im);
  if (!im)
    return ST_ENOMEM;
  info->images = im;
  const char *sp = strchr(v, ' ');
  char hex[80];
  if (!sp || (size_t)(sp - v) >= sizeof hex)
    return ST_EFORMAT;
  snprintf(hex, sizeof hex, "%.*s", (int)(sp - v), v);
  st_build_image *m = &im[info->n_images];
  *m = (st_build_image){0};
  const char *cell = strchr(sp + 1, ' '); /* neither a ref nor a cell has spaces */
  if (st_digest_parse(&m->digest, hex, NULL) < 0 || !cell)
    return ST_EFORMAT;
  if (!(m->ref = strndup(sp + 1, (size_t)(cell - sp - 1))) || !(m->cell = strdup(cell + 1))) {
    free(m->ref);
    return ST_ENOMEM;
  }
  unesc(m->ref);
  unesc(m->cell);
  info->n_images++;
  return ST_OK;
}

/* One "key value" line of a record. */
static int record_line(st_build_info *r, const char *k, char *v) {
  char *end;
  int rc = ST_OK;
  if (!strcmp(k, "id"))
    rc = st_digest_parse(&r->id, v, NULL) < 0 ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "state"))
    rc = parse_state(v, &r->state) < 0 ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "attempt"))
    r->attempt = (uint32_t)strtoul(v, &end, 10), rc = *end ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "recipe-name"))
    rc = (free(r->req.recipe_name), r->req.recipe_name = strdup(v)) ? ST_OK : ST_ENOMEM;
  else if (!strcmp(k, "context"))
    rc = st_digest_parse(&r->req.context, v, NULL) < 0 ? ST_EFORMAT
                                                         : (r->req.has_context = true, ST_OK);
  else if (!strcmp(k, "cells"))
    rc = (free(r->req.cells), r->req.cells = strdup(v)) ? ST_OK : ST_ENOMEM;
  else if (!strcmp(k, "mtime"))
    r->req.mtime = strtoll(v, &end, 10), rc = *end ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "submitted"))
    r->submitted = strtod(v, &end), rc = *end ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "started"))
    r->started = strtod(v, &end), rc = *end ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "finished"))
    r->finished = strtod(v, &end), rc = *end ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "error-code"))
    r->error_code = (int)strtol(v, &end, 10), rc = *end ? ST_EFORMAT : ST_OK;
  else if (!strcmp(k, "error"))
    rc = (free(r->error), r->error = strdup(v)) ? ST_OK : ST_ENOMEM;
  else if (!strcmp(k, "image"))
    rc = add_image(r, v);
  /* unknown keys are skipped: a newer writer may add some */
  if (rc == ST_OK && strcmp(k, "image")) {
    char **s = !strcmp(k, "recipe-name") ? &r->req.recipe_name
               : !strcmp(k, "cells")     ? &r->req.cells
               : !strcmp(k, "error")     ? &r->error
                                         : NULL;
    if (s)
      unesc(*s);
  }
  return rc;
}

int st_bq_record_parse(st_build_info *out, const char *text, size_t len, st_error *err) {
  st_build_info r = {0};
  _cleanup_free_ char *copy = strndup(text, len);
  if (!copy)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int lineno = 0, rc = ST_OK;
  char *save = NULL;
  bool have_id = false, have_state = false;
  for (char *line = strtok_r(copy, "\n", &save); line && rc == ST_OK;
       line = strtok_r(NULL, "\n", &save)) {
    lineno++;
    if (lineno == 1) {
      if (strcmp(line, RECORD_MAGIC))
        rc = st_error_set(err, ST_EFORMAT, "line 1: not a build record");
      continue;
    }
    char *sp = strchr(line, ' ');
    if (!sp) {
      rc = st_error_set(err, ST_EFORMAT, "line %d: expected 'key value'", lineno);
      break;
    }
    *sp = '\0';
    have_id |= !strcmp(line, "id");
    have_state |= !strcmp(line, "state");
    rc = record_line(&r, line, sp + 1);
    if (rc < 0)
      st_error_set(err, rc, "line %d: %s", lineno,
                   rc == ST_ENOMEM ? "out of memory" : "bad value");
  }
  if (rc == ST_OK && (!have_id || !have_state || !r.req.recipe_name))
    rc = st_error_set(err, ST_EFORMAT, "id, state or recipe-name missing");
  if (rc < 0) {
    st_build_info_clear(&r);
    return rc;
  }
  *out = r;
  return ST_OK;
}

/* ---- events ---- */

int st_bq_events_format(const st_bevent *v, size_t n, char **out, size_t *len) {
  struct buf b = {0};
  put(&b, "%s", "");
  char hex[ST_DIGEST_HEX_LEN + 1];
  for (size_t i = 0; i < n; i++) {
    const st_bevent *e = &v[i];
    put(&b, "%" PRIu64 "\t%.6f\t%d\t%d\t%d\t%" PRIu32 "\t%" PRIu32 "\t%" PRIu64 "\t%" PRIu64
            "\t%.6f\t%s\t",
        e->seq, e->time, (int)e->kind, (int)e->state, (int)e->layer_state, e->index, e->count,
        e->bytes, e->bytes_new, e->seconds, st_digest_hex(&e->digest, hex));
    put_esc(&b, e->cell);
    put(&b, "\t");
    put_esc(&b, e->layer);
    put(&b, "\t%s", e->text ? "+" : "-");
    put_esc(&b, e->text);
    put(&b, "\n");
  }
  return buf_done(&b, out, len);
}

static int event_parse(st_bevent *e, char *line) {
  char *f[14];
  size_t n = 0;
  for (char *p = line; n < 14; n++) {
    f[n] = p;
    char *tab = strchr(p, '\t');
    if (!tab) {
      n++;
      break;
    }
    *tab = '\0';
    p = tab + 1;
  }
  if (n != 14)
    return ST_EFORMAT;
  char *end;
  int k = (int)strtol(f[2], &end, 10), st = (int)strtol(f[3], NULL, 10),
      ls = (int)strtol(f[4], NULL, 10);
  if (k < 0 || k > ST_BEV_IMAGE || st < 0 || st >= ST_BUILD_STATE_COUNT || ls < 0 ||
      ls > ST_LAYER_FAILED)
    return ST_EFORMAT;
  *e = (st_bevent){.seq = strtoull(f[0], NULL, 10), .time = strtod(f[1], NULL),
                   .kind = (st_bevent_kind)k, .state = (st_build_state)st,
                   .layer_state = (st_layer_state)ls, .index = (uint32_t)strtoul(f[5], NULL, 10),
                   .count = (uint32_t)strtoul(f[6], NULL, 10),
                   .bytes = strtoull(f[7], NULL, 10), .bytes_new = strtoull(f[8], NULL, 10),
                   .seconds = strtod(f[9], NULL)};
  if (st_digest_parse(&e->digest, f[10], NULL) < 0 || (f[13][0] != '+' && f[13][0] != '-'))
    return ST_EFORMAT;
  unesc(f[11]);
  unesc(f[12]);
  unesc(f[13] + 1);
  if (!(e->cell = strdup(f[11])) || !(e->layer = strdup(f[12])) ||
      (f[13][0] == '+' && !(e->text = strdup(f[13] + 1)))) {
    st_bevent_clear(e);
    return ST_ENOMEM;
  }
  return ST_OK;
}

int st_bq_events_parse(st_bevent **out, size_t *n_out, const char *text, size_t len,
                       st_error *err) {
  _cleanup_free_ char *copy = strndup(text, len);
  if (!copy)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  size_t lines = 0;
  for (size_t i = 0; i < len; i++)
    lines += text[i] == '\n';
  st_bevent *v = calloc(lines + 1, sizeof *v);
  if (!v)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  size_t n = 0;
  int rc = ST_OK;
  char *save = NULL;
  for (char *line = strtok_r(copy, "\n", &save); line && rc == ST_OK && n < lines + 1;
       line = strtok_r(NULL, "\n", &save)) {
    rc = event_parse(&v[n], line);
    if (rc < 0)
      st_error_set(err, rc, "event line %zu: %s", n + 1,
                   rc == ST_ENOMEM ? "out of memory" : "malformed");
    else
      n++;
  }
  if (rc < 0) {
    st_bevents_free(v, n);
    return rc;
  }
  *out = v;
  *n_out = n;
  return ST_OK;
}
