/* SPDX-License-Identifier: Apache-2.0 */
/* Digest map: power-of-two table kept at most half full. */
#include "dset.h"

#include <stdlib.h>
#include <string.h>

struct slot {
  st_digest key;
  uint64_t value;
  bool used;
};

struct st_dset {
  struct slot *slots;
  size_t cap, count;
};

static uint64_t hash(const st_digest *d) {
  uint64_t h;
  memcpy(&h, d->bytes, sizeof h);
  return h;
}

st_dset *st_dset_new(void) {
  st_dset *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->cap = 64;
  s->slots = calloc(s->cap, sizeof *s->slots);
  if (!s->slots) {
    free(s);
    return NULL;
  }
  return s;
}

void st_dset_free(st_dset *s) {
  if (!s)
    return;
  free(s->slots);
  free(s);
}

static struct slot *find(const st_dset *s, const st_digest *d) {
  size_t mask = s->cap - 1;
  for (size_t i = hash(d) & mask;; i = (i + 1) & mask) {
    struct slot *sl = &s->slots[i];
    if (!sl->used || st_digest_equal(&sl->key, d))
      return sl;
  }
}

static int grow(st_dset *s) {
  struct slot *old = s->slots;
  size_t oldcap = s->cap;
  s->slots = calloc(oldcap * 2, sizeof *s->slots);
  if (!s->slots) {
    s->slots = old;
    return ST_ENOMEM;
  }
  s->cap = oldcap * 2;
  for (size_t i = 0; i < oldcap; i++)
    if (old[i].used)
      *find(s, &old[i].key) = old[i];
  free(old);
  return ST_OK;
}

int st_dset_insert(st_dset *s, const st_digest *d, uint64_t value) {
  if ((s->count + 1) * 2 > s->cap && grow(s) < 0)
    return ST_ENOMEM;
  struct slot *sl = find(s, d);
  if (sl->used)
    return 0;
  sl->used = true;
  sl->key = *d;
  sl->value = value;
  s->count++;
  return 1;
}

bool st_dset_get(const st_dset *s, const st_digest *d, uint64_t *value) {
  struct slot *sl = find(s, d);
  if (!sl->used)
    return false;
  if (value)
    *value = sl->value;
  return true;
}

size_t st_dset_count(const st_dset *s) { return s->count; }

void st_dset_clear(st_dset *s) {
  memset(s->slots, 0, s->cap * sizeof *s->slots);
  s->count = 0;
}
