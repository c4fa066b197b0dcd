/* SPDX-License-Identifier: Apache-2.0 */
/* Levelled logging to stderr. The level comes from STRATA_LOG
 * (error|warn|info|debug|trace) and is raised by each -v on the command line. */
#pragma once

typedef enum {
  ST_LOG_ERROR = 0,
  ST_LOG_WARN = 1,
  ST_LOG_INFO = 2,
  ST_LOG_DEBUG = 3,
  ST_LOG_TRACE = 4,
} st_log_level;

/* Reads STRATA_LOG; an unknown value leaves the default (warn). */
void st_log_init_from_env(void);
void st_log_set_level(st_log_level level);
st_log_level st_log_get_level(void);
/* Parses a level name; returns -1 for an unknown one. */
int st_log_level_parse(const char *name);

void st_log(st_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define st_log_enabled(lvl) ((lvl) <= st_log_get_level())
#define st_error_log(...) st_log(ST_LOG_ERROR, __VA_ARGS__)
#define st_warn(...) st_log(ST_LOG_WARN, __VA_ARGS__)
#define st_info(...) st_log(ST_LOG_INFO, __VA_ARGS__)
#define st_debug(...) st_log(ST_LOG_DEBUG, __VA_ARGS__)
