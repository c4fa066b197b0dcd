/* SPDX-License-Identifier: Apache-2.0 */
/* A one-line progress display on stderr for long operations, redrawn at most
 * ten times a second, and only when stderr is a terminal. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cleanup.h"

typedef struct st_progress st_progress;

/* label is copied. When enabled is false every call is a no-op. NULL on OOM
 * (callers may pass NULL to every other function). */
st_progress *st_progress_new(const char *label, uint64_t total_bytes, bool enabled);
/* Sets the total when it becomes known after creation. */
void st_progress_set_total(st_progress *p, uint64_t total_bytes);
/* done_bytes is absolute, not a delta. Thread-safe. */
void st_progress_update(st_progress *p, uint64_t done_bytes);
/* Clears the line and frees. NULL is a no-op. */
void st_progress_free(st_progress *p);
ST_DEFINE_FREEP(st_progress, st_progress_free)
/* True when stderr is a terminal and STRATA_PROGRESS is not "0". */
bool st_progress_wanted(void);
/* "1.5 GiB" style rendering into buf (at least 16 bytes). Returns buf. */
char *st_format_bytes(uint64_t n, char *buf, unsigned len);
