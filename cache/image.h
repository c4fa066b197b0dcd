/* SPDX-License-Identifier: Apache-2.0 */
/* Image manifests (ordered layer digests + config) and the names that point
 * at them: tags ("name:tag" -> image digest) and build cache keys (key ->
 * layer digest), kept as small metadata files in the store. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"
#include "digest.h"
#include "error.h"
#include "store.h"

#define ST_IMAGE_VERSION 1

typedef struct {
  char *key;   /* owned */
  char *value; /* owned */
} st_kv;

typedef struct {
  st_digest digest;
  char *name; /* owned */
  uint64_t size;
} st_image_layer;

typedef struct {
  st_image_layer *layers; /* owned, bottom first */
  size_t n_layers;
  st_kv *env;             /* owned, sorted by key */
  size_t n_env;
  char *workdir;          /* owned, nullable */
  char **entrypoint;      /* owned */
  size_t n_entrypoint;
  st_kv *labels;          /* owned, sorted by key */
  size_t n_labels;
} st_image;

void st_image_free(st_image *img);
ST_DEFINE_FREEP(st_image, st_image_free)
/* Sorts env and labels by key; a repeated key is ST_EINVAL. */
int st_image_normalize(st_image *img, st_error *err);
int st_image_encode(const st_image *img, uint8_t **out, size_t *len, st_error *err);
int st_image_decode(st_image **out, const uint8_t *data, size_t len, st_error *err);
int st_image_save(st_store *s, const st_image *img, st_digest *digest_out, st_error *err);
int st_image_load(st_image **out, st_store *s, const st_digest *d, st_error *err);
/* Value of a label or env key; NULL if absent. */
const char *st_kv_get(const st_kv *kv, size_t n, const char *key);

/* Splits "name:tag" (name: [a-z0-9][a-z0-9._/-]*, tag: [A-Za-z0-9_][A-Za-z0-9._-]*,
 * at most 128 bytes). ST_EINVAL naming the text otherwise. Both malloc'd. */
int st_image_ref_parse(const char *text, char **name_out, char **tag_out, st_error *err);
int st_tag_set(st_store *s, const char *name, const char *tag, const st_digest *d,
               st_error *err);
/* ST_ENOENT "image NAME:TAG not found". */
int st_tag_get(st_store *s, const char *name, const char *tag, st_digest *out, st_error *err);
int st_tag_delete(st_store *s, const char *name, const char *tag, st_error *err);
typedef int (*st_tag_cb)(const char *name, const char *tag, const st_digest *d, void *ud);
/* Calls cb for every tag, sorted by name then tag. */
int st_tag_list(st_store *s, st_tag_cb cb, void *ud, st_error *err);
/* "name:tag" or "sha256:<hex>" (an image digest present in the store). */
int st_image_resolve(st_store *s, const char *ref, st_digest *out, st_error *err);

/* Build cache: the layer built for a key. ST_ENOENT when none. */
int st_build_key_get(st_store *s, const st_digest *key, st_digest *layer_out, st_error *err);
int st_build_key_set(st_store *s, const st_digest *key, const st_digest *layer, st_error *err);
