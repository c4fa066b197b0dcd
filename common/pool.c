/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded thread pool: a ring buffer of tasks guarded by one mutex and three
 * condition variables (not empty, not full, idle). */
#include "pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct task {
  st_pool_fn fn;
  void *arg;
};

struct st_pool {
  pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full, idle;
  struct task *ring;
  unsigned cap, head, len;
  unsigned running; /* tasks taken by a worker and not finished */
  bool stopping;
  unsigned nthreads;
  pthread_t *threads;
};

static void *worker(void *p) {
  st_pool *pool = p;
  pthread_mutex_lock(&pool->lock);
  for (;;) {
    while (pool->len == 0 && !pool->stopping)
      pthread_cond_wait(&pool->not_empty, &pool->lock);
    if (pool->len == 0 && pool->stopping)
      break;
    struct task t = pool->ring[pool->head];
    pool->head = (pool->head + 1) % pool->cap;
    pool->len--;
    pool->running++;
    pthread_cond_signal(&pool->not_full);
    pthread_mutex_unlock(&pool->lock);
    t.fn(t.arg);
    pthread_mutex_lock(&pool->lock);
    pool->running--;
    if (pool->len == 0 && pool->running == 0)
      pthread_cond_broadcast(&pool->idle);
  }
  pthread_mutex_unlock(&pool->lock);
  return NULL;
}

int st_pool_new(st_pool **out, unsigned nthreads, unsigned queue_max, st_error *err) {
  st_pool *pool = calloc(1, sizeof *pool);
  if (!pool)
    return st_error_set(err, ST_ENOMEM, "thread pool: out of memory");
  pool->nthreads = nthreads;
  pool->cap = queue_max ? queue_max : 2 * (nthreads ? nthreads : 1);
  pool->ring = calloc(pool->cap, sizeof *pool->ring);
  pool->threads = calloc(nthreads ? nthreads : 1, sizeof *pool->threads);
  if (!pool->ring || !pool->threads) {
    free(pool->ring);
    free(pool->threads);
    free(pool);
    return st_error_set(err, ST_ENOMEM, "thread pool: out of memory");
  }
  pthread_mutex_init(&pool->lock, NULL);
  pthread_cond_init(&pool->not_empty, NULL);
  pthread_cond_init(&pool->not_full, NULL);
  pthread_cond_init(&pool->idle, NULL);
  for (unsigned i = 0; i < nthreads; i++) {
    if (pthread_create(&pool->threads[i], NULL, worker, pool) != 0) {
      pool->nthreads = i;
      st_pool_free(pool);
      return st_error_set(err, ST_EIO, "thread pool: cannot start thread %u", i);
    }
  }
  *out = pool;
  return ST_OK;
}

void st_pool_submit(st_pool *pool, st_pool_fn fn, void *arg) {
  if (pool->nthreads == 0) {
    fn(arg);
    return;
  }
  pthread_mutex_lock(&pool->lock);
  while (pool->len == pool->cap)
    pthread_cond_wait(&pool->not_full, &pool->lock);
  pool->ring[(pool->head + pool->len) % pool->cap] = (struct task){fn, arg};
  pool->len++;
  pthread_cond_signal(&pool->not_empty);
  pthread_mutex_unlock(&pool->lock);
}

void st_pool_wait(st_pool *pool) {
  if (pool->nthreads == 0)
    return;
  pthread_mutex_lock(&pool->lock);
  while (pool->len > 0 || pool->running > 0)
    pthread_cond_wait(&pool->idle, &pool->lock);
  pthread_mutex_unlock(&pool->lock);
}

void st_pool_free(st_pool *pool) {
  if (!pool)
    return;
  st_pool_wait(pool);
  pthread_mutex_lock(&pool->lock);
  pool->stopping = true;
  pthread_cond_broadcast(&pool->not_empty);
  pthread_mutex_unlock(&pool->lock);
  for (unsigned i = 0; i < pool->nthreads; i++)
    pthread_join(pool->threads[i], NULL);
  pthread_mutex_destroy(&pool->lock);
  pthread_cond_destroy(&pool->not_empty);
  pthread_cond_destroy(&pool->not_full);
  pthread_cond_destroy(&pool->idle);
  free(pool->ring);
  free(pool->threads);
  free(pool);
}

unsigned st_pool_threads(const st_pool *pool) { return pool->nthreads; }

unsigned st_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1;
}
