/* SPDX-License-Identifier: Apache-2.0 */
/* A byte-rate limit shared by threads: each caller reserves the next slot
 * for its bytes and sleeps until that slot starts, so the running average
 * over all threads stays at or below the rate. */
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  pthread_mutex_t lock;
  uint64_t bytes_per_second; /* 0: unlimited, st_rate_wait returns at once */
  double next_slot;          /* monotonic time the next reservation starts */
} st_rate;

void st_rate_init(st_rate *r, uint64_t bytes_per_second);
void st_rate_destroy(st_rate *r);
/* Accounts `bytes` and sleeps until the caller is within the rate. */
void st_rate_wait(st_rate *r, size_t bytes);
