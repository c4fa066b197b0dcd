/* SPDX-License-Identifier: Apache-2.0 */
#include "rate.h"

#include <errno.h>
#include <time.h>

#include "fs.h"

void st_rate_init(st_rate *r, uint64_t bytes_per_second) {
  pthread_mutex_init(&r->lock, NULL);
  r->bytes_per_second = bytes_per_second;
  r->next_slot = 0;
}

void st_rate_destroy(st_rate *r) { pthread_mutex_destroy(&r->lock); }

void st_rate_wait(st_rate *r, size_t bytes) {
  if (!r->bytes_per_second)
    return;
  pthread_mutex_lock(&r->lock);
  double now = st_now();
  if (r->next_slot < now)
    r->next_slot = now;
  double start = r->next_slot;
  r->next_slot += (double)bytes / (double)r->bytes_per_second;
  pthread_mutex_unlock(&r->lock);
  if (start > now) {
    double wait = start - now;
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
      ;
  }
}
