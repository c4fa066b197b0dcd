/* SPDX-License-Identifier: Apache-2.0 */
/* The pool runs every task once, bounds its queue, and works inline. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "pool.h"

static atomic_int done;
static atomic_int running, max_running;

static void task(void *arg) {
  int now = ++running;
  int prev = max_running;
  while (now > prev && !atomic_compare_exchange_weak(&max_running, &prev, now))
    ;
  usleep(200);
  running--;
  done += *(int *)arg;
}

static void test_runs_every_task(void **state) {
  for (unsigned threads = 0; threads <= 4; threads++) {
    st_pool *p = NULL;
    assert_int_equal(st_pool_new(&p, threads, 3, NULL), 0);
    assert_int_equal(st_pool_threads(p), threads);
    done = 0;
    max_running = 0;
    int one = 1;
    for (int i = 0; i < 200; i++)
      st_pool_submit(p, task, &one);
    st_pool_wait(p);
    assert_int_equal(done, 200);
    assert_true(max_running <= (int)(threads ? threads : 1));
    st_pool_free(p);
  }
  st_pool_free(NULL);
}

static atomic_int gate_open;
static void blocking_task(void *arg) {
  while (!gate_open)
    usleep(100);
  done++;
}

struct producer {
  st_pool *p;
  atomic_int submitted;
};

static void *produce(void *arg) {
  struct producer *pr = arg;
  for (int i = 0; i < 10; i++) {
    st_pool_submit(pr->p, blocking_task, NULL);
    pr->submitted++;
  }
  return NULL;
}

static void test_queue_is_bounded(void **state) {
  struct producer pr = {0};
  assert_int_equal(st_pool_new(&pr.p, 1, 2, NULL), 0);
  done = 0;
  gate_open = 0;
  pthread_t t;
  pthread_create(&t, NULL, produce, &pr);
  usleep(100 * 1000);
  /* one task running + two queued: the producer must be blocked */
  assert_true(pr.submitted <= 3);
  gate_open = 1;
  pthread_join(t, NULL);
  st_pool_wait(pr.p);
  assert_int_equal(done, 10);
  st_pool_free(pr.p);
  assert_true(st_cpu_count() >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runs_every_task),
      cmocka_unit_test(test_queue_is_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
