/* SPDX-License-Identifier: Apache-2.0 */
/* File helpers: bounded reads, atomic writes, mkdir -p. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "progress.h"

static void test_atomic_write_and_bounded_read(void **state) {
  char *dir = tu_mkdtemp();
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  st_error err = {0};
  assert_int_equal(st_mkdir_p(dfd, "a/b/c", 0755, &err), 0);
  assert_int_equal(st_mkdir_p(dfd, "a/b/c", 0755, &err), 0); /* idempotent */
  assert_int_equal(st_write_file_atomic(dfd, "a/b/c/f", "hello", 5, 0644, &err), 0);
  assert_int_equal(st_write_file_atomic(dfd, "a/b/c/f", "bye", 3, 0644, &err), 0);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(st_read_file_at(dfd, "a/b/c/f", 100, &data, &len, &err), 0);
  assert_int_equal(len, 3);
  assert_string_equal((char *)data, "bye");
  free(data);
  assert_int_equal(st_read_file_at(dfd, "a/b/c/f", 2, &data, &len, &err), ST_ELIMIT);
  assert_non_null(strstr(err.msg, "a/b/c/f"));
  assert_int_equal(st_read_file_at(dfd, "nope", 2, &data, &len, &err), ST_ENOENT);
  assert_int_equal(st_read_file_at(dfd, "a", 2, &data, &len, &err), ST_EINVAL);
  /* no temp files left behind */
  assert_int_equal(tu_sh("test $(ls -A %s/a/b/c | wc -l) -eq 1", dir), 0);
  close(dfd);
  tu_rmtree(dir);
  free(dir);
}

static void test_format_bytes(void **state) {
  char b[16];
  assert_string_equal(st_format_bytes(0, b, sizeof b), "0 B");
  assert_string_equal(st_format_bytes(1536, b, sizeof b), "1.5 KiB");
  assert_string_equal(st_format_bytes(3ull << 30, b, sizeof b), "3.0 GiB");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_atomic_write_and_bounded_read),
      cmocka_unit_test(test_format_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
