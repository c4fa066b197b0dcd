/* SPDX-License-Identifier: Apache-2.0 */
/* Recipes: loading and validating a recipe file (YAML, with `extends`), expanding its matrix
 * into cells, and instantiating one cell into the concrete layer specs the build engine
 * consumes. The format is documented in docs/RECIPES.md. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Limits (docs/RECIPES.md, "Limits"). */
#define ST_RECIPE_MAX_BYTES (1u << 20) /* size of one recipe file */
#define ST_RECIPE_MAX_LAYERS 64        /* layers after extends */
#define ST_RECIPE_MAX_AXES 16          /* matrix axes after extends */
#define ST_RECIPE_MAX_COMBOS 4096      /* product of the axis sizes, before exclusions */
#define ST_RECIPE_MAX_CELLS 256        /* cells after exclusions */
#define ST_RECIPE_MAX_EXTENDS 16       /* files in one extends chain */
#define ST_RECIPE_MAX_DEPTH 32         /* YAML nesting */
#define ST_RECIPE_MAX_STRING 65536     /* one string after variable substitution */
#define ST_RECIPE_MAX_GLOB 4096        /* files matched by one deb glob */
#define ST_RECIPE_MAX_LIST 4096        /* entries of one list or map: sources, delete, run,
                                          env, labels, entrypoint, exclude */

/* A position in a recipe file, 1-based. */
typedef struct {
  int line;
  int col;
} st_loc;

/* A loaded, validated recipe (extends resolved). Opaque. */
typedef struct st_recipe st_recipe;

/* One matrix cell: a value for every axis, in axis order. A recipe without a matrix has one
 * cell with n == 0. Owns its strings. */
typedef struct {
  size_t n;      /* number of variables (= number of axes) */
  char **names;  /* axis names, in the order the matrix declares them (owned) */
  char **values; /* values[i] is the value of names[i] (owned) */
} st_cell;

/* A --cell filter (st_recipe_cell_filter_parse). Opaque. */
typedef struct st_cell_filter st_cell_filter;

typedef enum {
  ST_SOURCE_DIR = 0,     /* a local directory tree, copied under dest */
  ST_SOURCE_ARCHIVE = 1, /* an archive (libarchive), unpacked under dest */
  ST_SOURCE_DEB = 2,     /* Debian packages: data unpacked at dest, control into dpkg status */
  ST_SOURCE_FILE = 3,    /* a single regular file, written at dest */
  ST_SOURCE_OCI = 4,     /* an OCI image layout: its layers applied in order, under dest */
} st_source_kind;

/* One concrete input of a layer. Everything is owned by the instance. */
typedef struct {
  st_source_kind kind; /* which key named the input */
  size_t n_paths;      /* >= 1; more than one only for a deb glob */
  char **paths;        /* absolute, lexically normalised input paths; a deb glob's matches are
                          sorted by strcmp (owned) */
  char **rel_paths;    /* the same inputs as recorded in the canonical text: relative to the
                          directory of the recipe file that declared the source (absolute if
                          the recipe wrote an absolute path) (owned) */
  char *dest;          /* absolute, normalised destination in the image (owned) */
  unsigned strip;      /* archive: leading path components to drop; 0 otherwise */
  int mode;            /* file: permission bits (0..07777) to set, or -1 to keep the file's */
  bool owner_source;   /* dir/file: keep the owner found on disk (owner: source) */
  uint32_t uid, gid;   /* dir/file: owner to set when !owner_source (default 0:0);
                          0 and unused for archive/deb (the package or archive decides) */
  char *ref;           /* oci: the manifest's ref.name, NULL = the only manifest (owned) */
  char *recipe_file;   /* the recipe file that declared the source, for messages (owned) */
  st_loc loc;          /* where the source's kind key is, for messages */
} st_recipe_source;

/* One layer, bottom first in st_recipe_instance.layers. */
typedef struct {
  char *name;                /* layer name, unique within the recipe (owned) */
  size_t n_sources;
  st_recipe_source *sources; /* in recipe order (owned; NULL when n_sources == 0) */
  size_t n_deletes;
  char **deletes;            /* absolute normalised paths to white out (owned) */
  size_t n_runs;
  char **runs;               /* shell commands, run in order by /bin/sh -c (owned) */
  char *recipe_file;         /* the recipe file that declared the layer (owned) */
  st_loc loc;                /* where the layer's mapping starts */
} st_recipe_layer;

/* A key/value pair of the image config. */
typedef struct {
  char *key;   /* (owned) */
  char *value; /* variables substituted (owned) */
} st_recipe_kv;

/* A recipe instantiated for one cell. Everything is owned by the instance and independent of
 * the recipe it came from. */
typedef struct {
  char *image;               /* image name, e.g. "pytorch" (owned) */
  char *tag;                 /* tag after substitution, e.g. "2.7-cu12.4" (owned) */
  char *ref;                 /* "image:tag" (owned) */
  char *cell_name;           /* st_cell_name() of the cell, "" without a matrix (owned) */
  size_t n_layers;
  st_recipe_layer *layers;   /* bottom first (owned) */
  size_t n_env;
  st_recipe_kv *env;         /* config.env, sorted by key (strcmp) (owned) */
  size_t n_labels;
  st_recipe_kv *labels;      /* config.labels, sorted by key (strcmp) (owned) */
  char *workdir;             /* absolute working directory, NULL if unset (owned) */
  size_t n_entrypoint;
  char **entrypoint;         /* entrypoint argv (owned; may be empty) */
  bool has_entrypoint;       /* the recipe set entrypoint (even to []) */
} st_recipe_instance;

/* Loads the recipe at path, resolving `extends`, and validates all of it (keys, types,
 * variables, matrix, tags of every cell). On failure err holds one line
 * "FILE:LINE:COL: message" and the return is ST_EFORMAT, ST_ENOENT (the recipe or an
 * extends target is missing), ST_EPERM/ST_EIO (unreadable) or ST_ENOMEM. *out (owned by
 * the caller, st_recipe_free) is written only on success. */
int st_recipe_load(st_recipe **out, const char *path, st_error *err);
/* Same, from text in memory. file_name (not opened) names the text in messages, and its
 * directory part prefixes the names of `extends` bases in messages; base_dir (nullable: the
 * current directory) is where relative paths and `extends` resolve; it need not exist until
 * something is resolved against it. */
int st_recipe_load_text(st_recipe **out, const char *file_name, const char *base_dir,
                        const char *text, size_t len, st_error *err);
void st_recipe_free(st_recipe *r);

/* The image name (no variables). Borrowed from r. */
const char *st_recipe_image(const st_recipe *r);
/* The file the recipe was loaded from (as given). Borrowed from r. */
const char *st_recipe_file(const st_recipe *r);
/* The files of the recipe: 1 plus the number of `extends` bases. */
size_t st_recipe_file_count(const st_recipe *r);
/* The path file i was read from (0 is the top file, then the bases in the order they were
 * read): as given for the top file, its directory joined with the `extends` value for a base
 * (not normalised). NULL for the top file of a recipe loaded from text, or i out of range.
 * Borrowed from r. */
const char *st_recipe_file_path(const st_recipe *r, size_t i);

/* All cells: the cartesian product of the axes (first axis outermost) minus exclusions.
 * *cells_out (st_cells_free) and *n_out are written on success; n >= 1. Returns 0 or
 * ST_ENOMEM. */
int st_recipe_cells(const st_recipe *r, st_cell **cells_out, size_t *n_out, st_error *err);
void st_cells_free(st_cell *cells, size_t n);
/* "cuda=12.4,torch=2.7" in axis order, "" for the cell of a recipe without a matrix.
 * malloc'd (caller frees); NULL on OOM. */
char *st_cell_name(const st_cell *c);

/* Parses a --cell filter "k=v[,k=v...]" against r's axes. A key given more than once
 * matches any of its values; different keys must all match. An unknown axis or a value
 * that is not in the axis is ST_EINVAL with a one-line message. *out (st_cell_filter_free)
 * written on success. */
int st_recipe_cell_filter_parse(const st_recipe *r, const char *spec, st_cell_filter **out,
                                st_error *err);
void st_cell_filter_free(st_cell_filter *f);
/* True if cell c matches the filter; a NULL filter matches every cell. */
bool st_cell_matches(const st_cell_filter *f, const st_cell *c);

/* Instantiates r for cell (one of st_recipe_cells): substitutes variables, resolves and
 * checks every input on disk (a deb glob must match at least one regular file) and applies
 * defaults. Returns ST_ENOENT for a missing input, ST_EFORMAT for a wrong input type or an
 * invalid value after substitution (both "FILE:LINE:COL: message" naming the source),
 * ST_EINVAL if cell does not belong to r, ST_ENOMEM. *out (st_recipe_instance_free) is
 * written on success. */
int st_recipe_instantiate(const st_recipe *r, const st_cell *cell, st_recipe_instance **out,
                          st_error *err);
void st_recipe_instance_free(st_recipe_instance *ri);

/* The canonical text of layer layer_index of ri (docs/RECIPES.md, "Canonical layer text"):
 * deterministic, one field per line, every field that affects the layer's content and no
 * absolute path of the checkout. Part of the build cache key. malloc'd (caller frees); NULL
 * on OOM. layer_index must be < ri->n_layers. */
char *st_recipe_layer_canonical(const st_recipe_instance *ri, size_t layer_index);

/* Name of a source kind ("dir", "archive", "deb", "file", "oci"). */
const char *st_source_kind_name(st_source_kind kind);
