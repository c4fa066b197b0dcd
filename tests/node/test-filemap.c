/* SPDX-License-Identifier: Apache-2.0 */
/* The node's file map: records survive a reopen; a torn last record (a kill
 * during an append) is ignored and the next append starts on a record
 * boundary; a damaged record is skipped, the others still load; the newest
 * record for a key wins. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "filemap.h"

static void key_of(st_digest *k, int i) { st_sha256(k, &i, sizeof i); }
static void csum_of(uint8_t c[32], int i) { memset(c, 0x40 + i, 32); }

static void add_range(st_filemap *m, int from, int to) {
  size_t n = (size_t)(to - from);
  st_digest *keys = calloc(n, sizeof *keys);
  uint8_t(*csums)[32] = calloc(n, sizeof *csums);
  for (int i = from; i < to; i++) {
    key_of(&keys[i - from], i);
    csum_of(csums[i - from], i);
  }
  st_error err = {0};
  assert_int_equal(st_filemap_add(m, keys, (const uint8_t(*)[32])csums, n, &err), 0);
  free(keys);
  free(csums);
}

static void assert_has(const st_filemap *m, int i, bool want) {
  st_digest k;
  uint8_t c[32];
  key_of(&k, i);
  csum_of(c, i);
  const uint8_t *got = st_filemap_get(m, &k);
  if (!want) {
    assert_null(got);
    return;
  }
  assert_non_null(got);
  assert_memory_equal(got, c, 32);
}

static st_filemap *reopen(st_filemap *m, const char *path) {
  st_filemap_free(m);
  st_error err = {0};
  st_filemap *out = NULL;
  assert_int_equal(st_filemap_open(&out, path, &err), 0);
  return out;
}

static void test_filemap(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char path[4096];
  snprintf(path, sizeof path, "%s/repo.files", dir);
  st_filemap *m = reopen(NULL, path); /* missing: empty */
  assert_has(m, 1, false);
  add_range(m, 0, 300); /* more than one read buffer */
  assert_has(m, 299, true);
  m = reopen(m, path);
  for (int i = 0; i < 300; i++)
    assert_has(m, i, true);

  /* torn append: 30 stray bytes at the end */
  int fd = open(path, O_WRONLY | O_APPEND);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "torn torn torn torn torn torn ", 30), 30);
  close(fd);
  m = reopen(m, path);
  assert_has(m, 299, true);
  add_range(m, 300, 302);
  m = reopen(m, path);
  assert_has(m, 300, true);
  assert_has(m, 301, true);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_size % 72, 0);

  /* a damaged record (the 6th) is skipped, its neighbours load */
  fd = open(path, O_RDWR);
  uint8_t b;
  assert_int_equal(pread(fd, &b, 1, 5 * 72 + 40), 1);
  b ^= 0xff;
  assert_int_equal(pwrite(fd, &b, 1, 5 * 72 + 40), 1);
  close(fd);
  m = reopen(m, path);
  assert_has(m, 5, false);
  assert_has(m, 4, true);
  assert_has(m, 6, true);

  /* the newest record wins */
  st_digest k;
  key_of(&k, 7);
  uint8_t c[32];
  memset(c, 0x11, sizeof c);
  st_error err = {0};
  assert_int_equal(st_filemap_add(m, &k, (const uint8_t(*)[32])&c, 1, &err), 0);
  m = reopen(m, path);
  assert_memory_equal(st_filemap_get(m, &k), c, 32);
  st_filemap_free(m);
  tu_rmtree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_filemap)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
