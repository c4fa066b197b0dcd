/* SPDX-License-Identifier: Apache-2.0 */
/* The directory backend: layout, staging until flush, concurrent writers,
 * stale temp files, listing. */
#include "testutil.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"

static int setup(void **state) {
  *state = tu_mkdtemp();
  return 0;
}
static int teardown(void **state) {
  tu_rmtree(*state);
  free(*state);
  return 0;
}

static bool exists(const char *dir, const char *rel) {
  char p[PATH_MAX];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  return stat(p, &st) == 0;
}

static int count(const st_digest *d, uint64_t stored, void *ud) {
  (*(int *)ud)++;
  return 0;
}

static void test_layout_and_flush(void **state) {
  const char *dir = *state;
  st_error err = {0};
  st_store *s = NULL;
  char sdir[PATH_MAX];
  snprintf(sdir, sizeof sdir, "%s/store", dir);
  assert_int_equal(st_store_open(&s, sdir, 0, &err), ST_ENOENT); /* no store yet */
  assert_int_equal(st_store_open(&s, sdir, ST_STORE_CREATE, &err), 0);
  assert_true(exists(sdir, "config"));
  st_digest d;
  assert_int_equal(st_store_put(s, ST_KIND_CHUNK, "hello", 5, &d, NULL, &err), 0);
  char hex[65], rel[200];
  st_digest_hex(&d, hex);
  snprintf(rel, sizeof rel, "chunks/%.2s/%s", hex, hex);
  /* staged: readable through the store, not yet at its final path */
  assert_false(exists(sdir, rel));
  assert_int_equal(st_store_has(s, ST_KIND_CHUNK, &d, &err), 1);
  uint8_t *out = NULL;
  size_t len;
  assert_int_equal(st_store_get(s, ST_KIND_CHUNK, &d, &out, &len, &err), 0);
  free(out);
  assert_int_equal(st_store_flush(s, &err), 0);
  assert_true(exists(sdir, rel));
  assert_int_equal(tu_sh("test -z \"$(ls -A %s/tmp)\"", sdir), 0);
  int n = 0;
  assert_int_equal(st_store_list(s, ST_KIND_CHUNK, count, &n, &err), 0);
  assert_int_equal(n, 1);
  /* unflushed puts are dropped on free: no temp file, no object */
  st_digest d2;
  assert_int_equal(st_store_put(s, ST_KIND_CHUNK, "world", 5, &d2, NULL, &err), 0);
  st_store_free(s);
  assert_int_equal(tu_sh("test -z \"$(ls -A %s/tmp)\"", sdir), 0);
  assert_int_equal(st_store_open(&s, sdir, 0, &err), 0);
  assert_int_equal(st_store_has(s, ST_KIND_CHUNK, &d2, &err), 0);
  /* a stray file in a fan-out folder is ignored by list */
  snprintf(rel, sizeof rel, "%s/chunks/%.2s/junk", sdir, hex);
  tu_write(dir, rel + strlen(dir) + 1, "x", 1);
  n = 0;
  assert_int_equal(st_store_list(s, ST_KIND_CHUNK, count, &n, &err), 0);
  assert_int_equal(n, 1);
  st_store_free(s);
}

static void test_stale_tmp_removed(void **state) {
  const char *dir = *state;
  st_error err = {0};
  st_store_config cfg = st_store_config_default();
  assert_int_equal(st_store_init(dir, &cfg, &err), 0);
  /* pid 2^22+1 is beyond pid_max defaults: surely not running */
  tu_write(dir, "tmp/" "0000000000000000000000000000000000000000000000000000000000000000.0.4194305.1",
           "x", 1);
  char mine[200];
  snprintf(mine, sizeof mine,
           "tmp/1111111111111111111111111111111111111111111111111111111111111111.0.%d.1",
           (int)getpid());
  tu_write(dir, mine, "x", 1);
  st_store *s = NULL;
  assert_int_equal(st_store_open(&s, dir, 0, &err), 0);
  assert_false(exists(dir, "tmp/0000000000000000000000000000000000000000000000000000000000000000.0.4194305.1"));
  assert_true(exists(dir, mine)); /* a live process's temp file stays */
  st_store_free(s);
}

struct writer_arg {
  const char *dir;
  int id;
};

static void *writer(void *p) {
  struct writer_arg *a = p;
  st_store *s = NULL;
  st_error err = {0};
  if (st_store_open(&s, a->dir, 0, &err) < 0)
    return (void *)1;
  uint8_t buf[20000];
  for (int i = 0; i < 200; i++) {
    tu_random(buf, sizeof buf, (uint64_t)i); /* same objects from every writer */
    if (st_store_put(s, ST_KIND_CHUNK, buf, sizeof buf, NULL, NULL, &err) < 0)
      return (void *)2;
    if (i % 50 == 0 && st_store_flush(s, &err) < 0)
      return (void *)3;
  }
  int rc = st_store_flush(s, &err);
  st_store_free(s);
  return rc < 0 ? (void *)4 : NULL;
}

static void test_concurrent_writers_same_objects(void **state) {
  const char *dir = *state;
  st_error err = {0};
  st_store_config cfg = st_store_config_default();
  assert_int_equal(st_store_init(dir, &cfg, &err), 0);
  /* two processes and two threads write the same 200 chunks */
  pid_t pid = fork();
  if (pid == 0) {
    struct writer_arg a = {dir, 9};
    _exit(writer(&a) ? 1 : 0);
  }
  pthread_t t[2];
  struct writer_arg args[2] = {{dir, 0}, {dir, 1}};
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, writer, &args[i]);
  for (int i = 0; i < 2; i++) {
    void *r;
    pthread_join(t[i], &r);
    assert_null(r);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  st_store *s = NULL;
  assert_int_equal(st_store_open(&s, dir, 0, &err), 0);
  int n = 0;
  assert_int_equal(st_store_list(s, ST_KIND_CHUNK, count, &n, &err), 0);
  assert_int_equal(n, 200);
  for (int i = 0; i < 200; i++) {
    uint8_t buf[20000], *out = NULL;
    size_t len;
    st_digest d;
    tu_random(buf, sizeof buf, (uint64_t)i);
    st_sha256(&d, buf, sizeof buf);
    assert_int_equal(st_store_get(s, ST_KIND_CHUNK, &d, &out, &len, &err), 0);
    assert_memory_equal(out, buf, sizeof buf);
    free(out);
  }
  st_store_free(s);
  assert_int_equal(tu_sh("test -z \"$(ls -A %s/tmp)\"", dir), 0);
}

static void test_meta_names(void **state) {
  const char *dir = *state;
  st_error err = {0};
  st_store *s = NULL;
  assert_int_equal(st_store_open(&s, dir, ST_STORE_CREATE, &err), ST_ENOENT);
  char sdir[PATH_MAX];
  snprintf(sdir, sizeof sdir, "%s/s", dir);
  assert_int_equal(st_store_open(&s, sdir, ST_STORE_CREATE, &err), 0);
  assert_int_equal(st_store_meta_put(s, "refs/tags/a:b", "x", 1, &err), 0);
  uint8_t *out = NULL;
  size_t len;
  assert_int_equal(st_store_meta_get(s, "refs/tags/a:b", 10, &out, &len, &err), 0);
  free(out);
  const char *bad[] = {"../x", "/etc/passwd", "a//b", "a/", "", "a b"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(st_store_meta_put(s, bad[i], "x", 1, &err), ST_EINVAL);
  st_store_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_layout_and_flush, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stale_tmp_removed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_writers_same_objects, setup, teardown),
      cmocka_unit_test_setup_teardown(test_meta_names, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
