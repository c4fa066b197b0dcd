/* SPDX-License-Identifier: Apache-2.0 */
/* A bounded thread pool: a fixed set of workers and a queue with a maximum
 * length; st_pool_submit blocks while the queue is full, so producers can
 * never run ahead of the workers by more than queue_max tasks. */
#pragma once

#include "error.h"

typedef struct st_pool st_pool;
typedef void (*st_pool_fn)(void *arg);

/* nthreads 0 means "run each task inline in st_pool_submit". queue_max 0
 * means 2 * nthreads. Returns ST_OK or ST_ENOMEM/ST_EIO (thread creation);
 * *out written only on success. */
int st_pool_new(st_pool **out, unsigned nthreads, unsigned queue_max, st_error *err);
/* Queues fn(arg); blocks while the queue is full. Never fails. */
void st_pool_submit(st_pool *pool, st_pool_fn fn, void *arg);
/* Blocks until every task submitted so far has finished. */
void st_pool_wait(st_pool *pool);
/* Waits for all tasks, stops and joins the workers, frees. NULL is a no-op. */
void st_pool_free(st_pool *pool);
unsigned st_pool_threads(const st_pool *pool);

/* The number of online CPUs (at least 1). */
unsigned st_cpu_count(void);
