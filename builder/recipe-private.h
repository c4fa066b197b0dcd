/* SPDX-License-Identifier: Apache-2.0 */
/* Private to builder/recipe*.c; nothing else includes it. The recipe as loaded (before
 * substitution): every string remembers the file and position it came from, so that errors
 * found at any stage name FILE:LINE:COL. Also the tiny YAML document tree the loader reads. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe.h"

/* One file of an extends chain. */
typedef struct {
  char *display;     /* the name used in messages (as given, or resolved from extends) */
  char *display_dir; /* directory part of display, "." if none */
  char *dir;         /* absolute directory relative paths of this file resolve against */
  char *path;        /* the path the file was read from (NULL for a recipe given as text) */
} st_rfile;

/* A position: file and line/column. */
typedef struct {
  const st_rfile *file;
  st_loc loc;
} st_rpos;

/* A string read from a recipe with its position. s == NULL means "not given". */
typedef struct {
  char *s;
  st_rpos pos;
} st_rstr;

typedef enum { ST_RN_SCALAR, ST_RN_SEQ, ST_RN_MAP } st_rnode_kind;

/* A YAML node. Mapping keys are scalars; keys are unique. */
typedef struct st_rnode {
  st_rnode_kind kind;
  st_loc loc;              /* where the node starts */
  char *str;               /* scalar: the text as written, NUL-free (owned) */
  struct st_rnode **kids;  /* seq: items; map: key, value, key, value... (owned) */
  size_t n;                /* number of kids (2 per mapping entry) */
  size_t cap;
} st_rnode;

typedef enum { ST_ROWNER_ROOT = 0, ST_ROWNER_IDS = 1, ST_ROWNER_SOURCE = 2 } st_rowner;

typedef struct {
  st_source_kind kind;
  st_rstr path;  /* pos is the kind key */
  st_rstr dest;  /* s == NULL: default */
  int strip;     /* -1: not given */
  int mode;      /* -1: not given */
  st_rowner owner;
  uint32_t uid, gid;
  st_rstr ref;   /* oci: s == NULL: not given */
} st_rsource;

typedef struct {
  st_rstr name;
  st_rpos pos; /* the layer mapping */
  st_rsource *sources;
  size_t n_sources;
  st_rstr *deletes;
  size_t n_deletes;
  st_rstr *runs;
  size_t n_runs;
} st_rlayer;

typedef struct {
  st_rstr name;
  st_rstr *values;
  size_t n_values;
} st_raxis;

typedef struct {
  st_rpos pos;
  st_rstr *keys;
  st_rstr *values;
  size_t n;
} st_rexclude;

typedef struct {
  st_rstr key;
  st_rstr value;
} st_rkv;

struct st_recipe {
  st_rfile **files; /* every file of the extends chain, files[0] the top one */
  size_t n_files;
  st_rpos top;      /* the top file's root mapping, for "missing key" errors */
  st_rstr image;
  st_rstr tag;      /* s == NULL: "latest" */
  st_rstr matrix;   /* s != NULL if some file had a matrix; pos is the nearest one's key */
  st_raxis *axes;
  size_t n_axes;
  st_rexclude *excludes;
  size_t n_excludes;
  bool has_layers;
  st_rlayer *layers;
  size_t n_layers;
  st_rkv *env;
  size_t n_env;
  st_rkv *labels;
  size_t n_labels;
  st_rstr workdir;
  bool has_entrypoint;
  st_rstr *entrypoint;
  size_t n_entrypoint;
};

/* recipe-yaml.c */
/* Sets err to "FILE:LINE:COL: message" (one line: control characters become '?'). Returns
 * code. */
int st_rerr(st_error *err, int code, st_rpos pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int st_room(st_error *err);
/* Parses one YAML document (UTF-8 only; no anchors, aliases, tags or second document) into
 * a tree. *out is NULL for an empty document. */
int st_rdoc_parse(st_rnode **out, const st_rfile *f, const char *text, size_t len,
                  st_error *err);
void st_rnode_free(st_rnode *n);
const char *st_rnode_kind_name(st_rnode_kind k);
/* Reads a recipe file (regular, at most ST_RECIPE_MAX_BYTES) into *text (NUL-terminated);
 * errors are reported at pos as "WHAT: cannot read 'NAME': ...". dev/ino identify the
 * file. */
int st_rread(const char *path, const char *name, st_rpos pos, const char *what, char **text,
             size_t *len, uint64_t *dev, uint64_t *ino, st_error *err);

/* recipe-load.c */
/* Reads one file's document tree (root nullable: empty document) into r, which must be
 * zeroed; *extends gets the extends key (s NULL if none). Checks keys, types and every rule
 * that concerns a single field. */
int st_rparse_top(st_recipe *r, st_rstr *extends, const st_rfile *f, const st_rnode *root,
                  st_error *err);
void st_rfile_free(st_rfile *f);
void st_rstrs_free(st_rstr *v, size_t n);
void st_rstr_clear(st_rstr *s);
void st_rsource_clear(st_rsource *s);
void st_rlayer_clear(st_rlayer *l);
void st_raxis_clear(st_raxis *a);
void st_rexclude_clear(st_rexclude *e);
void st_rkv_clear(st_rkv *kv);

/* recipe.c */
/* Final checks of a merged recipe: required keys, limits, variables in every string,
 * cells, and the tag of every cell. */
int st_recipe_validate(const st_recipe *r, st_error *err);
/* Substitutes ${name} (from cell) and $$ in s->s; *out malloc'd. Errors name s->pos. */
int st_rsubst(char **out, const st_rstr *s, const st_cell *cell, st_error *err);
/* True if name matches [A-Za-z_][A-Za-z0-9_]*. */
bool st_rvar_name_ok(const char *name);
/* Tag syntax: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}. */
bool st_rtag_ok(const char *tag);
