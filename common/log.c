/* SPDX-License-Identifier: Apache-2.0 */
/* Levelled logging: one line per call, written with a single write(2) so that
 * lines from several threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic int current_level = ST_LOG_WARN;

static const char *const names[] = {"error", "warn", "info", "debug", "trace"};

int st_log_level_parse(const char *name) {
  if (!name)
    return -1;
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
    if (strcmp(name, names[i]) == 0)
      return i;
  if (strcmp(name, "warning") == 0)
    return ST_LOG_WARN;
  return -1;
}

void st_log_init_from_env(void) {
  int lvl = st_log_level_parse(getenv("STRATA_LOG"));
  if (lvl >= 0)
    current_level = lvl;
}

void st_log_set_level(st_log_level level) {
  if (level > ST_LOG_TRACE)
    level = ST_LOG_TRACE;
  current_level = level;
}

st_log_level st_log_get_level(void) { return current_level; }

void st_log(st_log_level level, const char *fmt, ...) {
  if ((int)level > current_level)
    return;
  char line[2048];
  int n = snprintf(line, sizeof line, "strata: %s%s", level == ST_LOG_INFO ? "" : names[level],
                   level == ST_LOG_INFO ? "" : ": ");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof line - 2)
    len = sizeof line - 2;
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}
