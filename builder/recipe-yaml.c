/* SPDX-License-Identifier: Apache-2.0 */
/* Recipe text to a small YAML document tree (libyaml events), with libyaml's problems
 * turned into "FILE:LINE:COL: message" errors; also the size-capped recipe file reader and
 * the error formatter every recipe file shares. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "cleanup.h"
#include "recipe-private.h"

int st_rerr(st_error *err, int code, st_rpos pos, const char *fmt, ...) {
  if (!err)
    return code;
  char msg[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  st_error_set(err, code, "%s:%d:%d: %s", pos.file ? pos.file->display : "<recipe>",
               pos.loc.line, pos.loc.col, msg);
  for (char *c = err->msg; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f)
      *c = '?';
  return code;
}

int st_room(st_error *err) {
  return st_error_set(err, ST_ENOMEM, "recipe: out of memory");
}

const char *st_rnode_kind_name(st_rnode_kind k) {
  switch (k) {
  case ST_RN_SCALAR: return "string";
  case ST_RN_SEQ: return "sequence";
  default: return "mapping";
  }
}

void st_rnode_free(st_rnode *n) {
  if (!n)
    return;
  for (size_t i = 0; i < n->n; i++)
    st_rnode_free(n->kids[i]);
  free(n->kids);
  free(n->str);
  free(n);
}

typedef struct {
  const st_rfile *f;
  const char *text;
  size_t len;
  st_rnode *root;
  st_rnode *stack[ST_RECIPE_MAX_DEPTH];
  int depth;
  int docs;
} doc_ctx;

static st_rpos at(const doc_ctx *d, yaml_mark_t m) {
  return (st_rpos){d->f, {(int)m.line + 1, (int)m.column + 1}};
}

/* Line and column (in characters) of a byte offset, for reader errors. */
static st_rpos at_offset(const doc_ctx *d, size_t off) {
  st_rpos p = {d->f, {1, 1}};
  if (off > d->len)
    off = d->len;
  for (size_t i = 0; i < off; i++) {
    unsigned char c = (unsigned char)d->text[i];
    if (c == '\n') {
      p.loc.line++;
      p.loc.col = 1;
    } else if ((c & 0xc0) != 0x80) {
      p.loc.col++;
    }
  }
  return p;
}

static int yaml_problem(const doc_ctx *d, const yaml_parser_t *p, st_error *err) {
  const char *problem = p->problem ? p->problem : "unknown problem";
  switch (p->error) {
  case YAML_MEMORY_ERROR:
    return st_room(err);
  case YAML_READER_ERROR:
    return st_rerr(err, ST_EFORMAT, at_offset(d, p->problem_offset),
                   "invalid text (recipes are UTF-8): %s (0x%X)", problem,
                   (unsigned)p->problem_value);
  default:
    if (p->context)
      return st_rerr(err, ST_EFORMAT, at(d, p->problem_mark),
                     "invalid YAML: %s (%s at line %d)", problem, p->context,
                     (int)p->context_mark.line + 1);
    return st_rerr(err, ST_EFORMAT, at(d, p->problem_mark), "invalid YAML: %s", problem);
  }
}

static int key_cmp(const void *a, const void *b) {
  const st_rnode *x = *(st_rnode *const *)a, *y = *(st_rnode *const *)b;
  int c = strcmp(x->str, y->str);
  if (c)
    return c;
  return x->loc.line != y->loc.line ? (x->loc.line > y->loc.line) - (x->loc.line < y->loc.line)
                                    : (x->loc.col > y->loc.col) - (x->loc.col < y->loc.col);
}

static int check_dup_keys(const doc_ctx *d, const st_rnode *map, st_error *err) {
  size_t n = map->n / 2;
  if (n < 2)
    return 0;
  _cleanup_free_ st_rnode **keys = calloc(n, sizeof *keys);
  if (!keys)
    return st_room(err);
  for (size_t i = 0; i < n; i++)
    keys[i] = map->kids[2 * i];
  qsort(keys, n, sizeof *keys, key_cmp);
  for (size_t i = 1; i < n; i++)
    if (!strcmp(keys[i - 1]->str, keys[i]->str))
      return st_rerr(err, ST_EFORMAT, (st_rpos){d->f, keys[i]->loc},
                     "duplicate key '%.64s' (first at line %d)", keys[i]->str,
                     keys[i - 1]->loc.line);
  return 0;
}

/* Takes ownership of node. */
static int attach(doc_ctx *d, st_rnode *node, st_error *err) {
  if (d->depth == 0) {
    if (d->root) { /* cannot happen within one document */
      st_rpos pos = {d->f, node->loc};
      st_rnode_free(node);
      return st_rerr(err, ST_EFORMAT, pos, "unexpected second root");
    }
    d->root = node;
    return 0;
  }
  st_rnode *parent = d->stack[d->depth - 1];
  if (parent->kind == ST_RN_MAP && parent->n % 2 == 0 && node->kind != ST_RN_SCALAR) {
    st_rpos pos = {d->f, node->loc};
    st_rnode_free(node);
    return st_rerr(err, ST_EFORMAT, pos, "mapping keys must be plain strings");
  }
  if (parent->n == parent->cap) {
    size_t cap = parent->cap ? parent->cap * 2 : 4;
    st_rnode **kids = realloc(parent->kids, cap * sizeof *kids);
    if (!kids) {
      st_rnode_free(node);
      return st_room(err);
    }
    parent->kids = kids;
    parent->cap = cap;
  }
  parent->kids[parent->n++] = node;
  return 0;
}

static int new_node(doc_ctx *d, const yaml_event_t *ev, st_rnode_kind kind, st_error *err) {
  st_rpos pos = at(d, ev->start_mark);
  const yaml_char_t *anchor = NULL, *tag = NULL;
  if (kind == ST_RN_SCALAR) {
    anchor = ev->data.scalar.anchor;
    tag = ev->data.scalar.tag;
  } else if (kind == ST_RN_SEQ) {
    anchor = ev->data.sequence_start.anchor;
    tag = ev->data.sequence_start.tag;
  } else {
    anchor = ev->data.mapping_start.anchor;
    tag = ev->data.mapping_start.tag;
  }
  if (anchor)
    return st_rerr(err, ST_EFORMAT, pos, "anchors and aliases are not supported");
  if (tag)
    return st_rerr(err, ST_EFORMAT, pos, "YAML tags are not supported");
  if (kind != ST_RN_SCALAR && d->depth == ST_RECIPE_MAX_DEPTH)
    return st_rerr(err, ST_EFORMAT, pos, "nested deeper than %d levels", ST_RECIPE_MAX_DEPTH);
  st_rnode *n = calloc(1, sizeof *n);
  if (!n)
    return st_room(err);
  n->kind = kind;
  n->loc = pos.loc;
  if (kind == ST_RN_SCALAR) {
    const char *v = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (memchr(v, '\0', len)) {
      free(n);
      return st_rerr(err, ST_EFORMAT, pos, "NUL character in a string");
    }
    n->str = strndup(v, len);
    if (!n->str) {
      free(n);
      return st_room(err);
    }
  }
  int rc = attach(d, n, err);
  if (rc < 0 || kind == ST_RN_SCALAR)
    return rc;
  d->stack[d->depth++] = n;
  return 0;
}

static int on_event(doc_ctx *d, const yaml_event_t *ev, st_error *err) {
  switch (ev->type) {
  case YAML_DOCUMENT_START_EVENT:
    if (++d->docs > 1)
      return st_rerr(err, ST_EFORMAT, at(d, ev->start_mark),
                     "more than one YAML document in a recipe");
    return 0;
  case YAML_ALIAS_EVENT:
    return st_rerr(err, ST_EFORMAT, at(d, ev->start_mark),
                   "anchors and aliases are not supported");
  case YAML_SCALAR_EVENT:
    return new_node(d, ev, ST_RN_SCALAR, err);
  case YAML_SEQUENCE_START_EVENT:
    return new_node(d, ev, ST_RN_SEQ, err);
  case YAML_MAPPING_START_EVENT:
    return new_node(d, ev, ST_RN_MAP, err);
  case YAML_SEQUENCE_END_EVENT:
    d->depth--;
    return 0;
  case YAML_MAPPING_END_EVENT:
    d->depth--;
    return check_dup_keys(d, d->stack[d->depth], err);
  default:
    return 0;
  }
}

int st_rdoc_parse(st_rnode **out, const st_rfile *f, const char *text, size_t len,
                  st_error *err) {
  if (!text) {
    text = "";
    len = 0;
  }
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p))
    return st_room(err);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);
  doc_ctx d = {.f = f, .text = text, .len = len};
  int rc = 0;
  bool done = false;
  while (!done && rc == 0) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      rc = yaml_problem(&d, &p, err);
      break;
    }
    rc = on_event(&d, &ev, err);
    done = ev.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  if (rc < 0) {
    st_rnode_free(d.root);
    return rc;
  }
  *out = d.root;
  return 0;
}

static int read_errno(int e, st_rpos pos, const char *what, const char *name, st_error *err) {
  int code = e == ENOENT || e == ENOTDIR ? ST_ENOENT : st_code_from_errno(e);
  return st_rerr(err, code, pos, "%s: cannot read '%.200s': %s", what, name, strerror(e));
}

int st_rread(const char *path, const char *name, st_rpos pos, const char *what, char **text,
             size_t *len, uint64_t *dev, uint64_t *ino, st_error *err) {
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return read_errno(errno, pos, what, name, err);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return read_errno(errno, pos, what, name, err);
  if (!S_ISREG(st.st_mode))
    return st_rerr(err, ST_EFORMAT, pos, "%s: '%.200s' is not a regular file", what, name);
  if (st.st_size > (off_t)ST_RECIPE_MAX_BYTES)
    return st_rerr(err, ST_EFORMAT, pos, "%s: '%.200s' is larger than %u bytes (1 MiB)", what,
                   name, ST_RECIPE_MAX_BYTES);
  _cleanup_free_ char *buf = malloc(ST_RECIPE_MAX_BYTES + 2);
  if (!buf)
    return st_room(err);
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, ST_RECIPE_MAX_BYTES + 1 - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return read_errno(errno, pos, what, name, err);
    if (r == 0)
      break;
    n += (size_t)r;
    if (n > ST_RECIPE_MAX_BYTES)
      return st_rerr(err, ST_EFORMAT, pos, "%s: '%.200s' is larger than %u bytes (1 MiB)",
                     what, name, ST_RECIPE_MAX_BYTES);
  }
  buf[n] = '\0';
  char *shrunk = realloc(buf, n + 1);
  if (shrunk)
    buf = shrunk;
  *text = ST_TAKE_PTR(buf);
  *len = n;
  *dev = (uint64_t)st.st_dev;
  *ino = (uint64_t)st.st_ino;
  return 0;
}
