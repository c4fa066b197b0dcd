/* SPDX-License-Identifier: Apache-2.0 */
/* Test helpers. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"
#include "unpack.h"

char *tu_mkdtemp(void) {
  const char *base = getenv("TMPDIR");
  char *path = NULL;
  assert_true(asprintf(&path, "%s/strata-test-XXXXXX", base && *base ? base : "/tmp") > 0);
  assert_non_null(mkdtemp(path));
  return path;
}

void tu_rmtree(const char *path) {
  if (path)
    assert_int_equal(st_remove_tree(AT_FDCWD, path, NULL), 0);
}

void tu_write(const char *dir, const char *rel, const void *data, size_t len) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  char *slash = strrchr(path, '/');
  *slash = '\0';
  assert_int_equal(st_mkdir_p(AT_FDCWD, path, 0755, NULL), 0);
  *slash = '/';
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(st_write_all(fd, data, len), 0);
  assert_int_equal(close(fd), 0);
}

void tu_random(void *buf, size_t len, uint64_t seed) {
  uint8_t *p = buf;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)(x >> 24);
  }
}

int tu_sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
