/* SPDX-License-Identifier: Apache-2.0 */
/* A hash map from SHA-256 digest to a 64-bit value (open addressing, linear
 * probing). Digests are uniformly distributed, so their first 8 bytes are
 * the hash. Not thread-safe: callers lock. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"
#include "digest.h"

typedef struct st_dset st_dset;

/* NULL on OOM. */
st_dset *st_dset_new(void);
void st_dset_free(st_dset *s);
ST_DEFINE_FREEP(st_dset, st_dset_free)
/* Inserts d -> value. Returns 1 if inserted, 0 if d was present (its value is
 * left unchanged), ST_ENOMEM if the table could not grow. */
int st_dset_insert(st_dset *s, const st_digest *d, uint64_t value);
/* True if present; writes the value to *value (nullable). */
bool st_dset_get(const st_dset *s, const st_digest *d, uint64_t *value);
size_t st_dset_count(const st_dset *s);
void st_dset_clear(st_dset *s);
