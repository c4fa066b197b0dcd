/* SPDX-License-Identifier: Apache-2.0 */
/* Progress line: "label  12.0 MiB / 1.0 GiB  1%  250.3 MB/s". */
#include "progress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"

struct st_progress {
  char label[64];
  uint64_t total;
  double start, last;
  bool enabled, drawn;
  pthread_mutex_t lock;
};

bool st_progress_wanted(void) {
  const char *env = getenv("STRATA_PROGRESS");
  if (env && strcmp(env, "0") == 0)
    return false;
  return isatty(STDERR_FILENO) == 1;
}

char *st_format_bytes(uint64_t n, char *buf, unsigned len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  unsigned u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)n);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

st_progress *st_progress_new(const char *label, uint64_t total, bool enabled) {
  st_progress *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  snprintf(p->label, sizeof p->label, "%s", label);
  p->total = total;
  p->enabled = enabled;
  p->start = p->last = st_now();
  pthread_mutex_init(&p->lock, NULL);
  return p;
}

void st_progress_set_total(st_progress *p, uint64_t total) {
  if (!p)
    return;
  pthread_mutex_lock(&p->lock);
  p->total = total;
  pthread_mutex_unlock(&p->lock);
}

void st_progress_update(st_progress *p, uint64_t done) {
  if (!p || !p->enabled)
    return;
  pthread_mutex_lock(&p->lock);
  double now = st_now();
  if (now - p->last >= 0.1) {
    p->last = now;
    char a[16], b[16], line[160];
    double secs = now - p->start;
    int pct = p->total ? (int)(done * 100 / p->total) : 0;
    int n = snprintf(line, sizeof line, "\r%-10s %10s / %-10s %3d%%  %6.1f MB/s\033[K", p->label,
                     st_format_bytes(done, a, sizeof a), st_format_bytes(p->total, b, sizeof b),
                     pct, secs > 0 ? (double)done / secs / 1e6 : 0.0);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) > 0)
      p->drawn = true;
  }
  pthread_mutex_unlock(&p->lock);
}

void st_progress_free(st_progress *p) {
  if (!p)
    return;
  if (p->drawn && write(STDERR_FILENO, "\r\033[K", 4) < 0)
    p->drawn = false;
  pthread_mutex_destroy(&p->lock);
  free(p);
}
