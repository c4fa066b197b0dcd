/* SPDX-License-Identifier: Apache-2.0 */
/* Private to builder/queue*.c; nothing else includes it. The text forms of a build's record
 * and event history as stored in the store's metadata (docs/BUILDS.md). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/* Limits on what is read back. */
#define ST_BUILD_RECORD_MAX (64u << 10)
#define ST_BUILD_EVENTS_MAX (64u << 20)
#define ST_BUILD_TEXT_MAX 8192 /* one event text or error line */

/* A copy of text (at most max bytes of it) with invalid UTF-8 and control characters
 * replaced by '?'. NULL on OOM. */
char *st_bq_clean(const char *text, size_t max);

/* Deep copies (ST_ENOMEM on failure, leaving *dst cleared). */
int st_bevent_copy(st_bevent *dst, const st_bevent *src);
void st_bevent_clear(st_bevent *ev);
int st_build_info_copy(st_build_info *dst, const st_build_info *src);
void st_build_info_clear(st_build_info *info);

/* Record: "strata-build 1" then "key value" lines. *out malloc'd. */
int st_bq_record_format(const st_build_info *info, char **out, size_t *len);
/* Parses a record (not the recipe text, which is stored apart). ST_EFORMAT naming the line. */
int st_bq_record_parse(st_build_info *out, const char *text, size_t len, st_error *err);

/* Events: one tab-separated line each. *out malloc'd. */
int st_bq_events_format(const st_bevent *v, size_t n, char **out, size_t *len);
int st_bq_events_parse(st_bevent **out, size_t *n_out, const char *text, size_t len,
                       st_error *err);
