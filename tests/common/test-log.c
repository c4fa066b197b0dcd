/* SPDX-License-Identifier: Apache-2.0 */
/* Log levels: parsing, STRATA_LOG, filtering, one line per call. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Runs fn with stderr redirected to a temp file; returns what was written. */
static char *capture(void (*fn)(void)) {
  char path[] = "/tmp/strata-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  fn();
  dup2(saved, STDERR_FILENO);
  close(saved);
  static char buf[4096];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  return buf;
}

static void emit_all(void) {
  st_log(ST_LOG_ERROR, "e %d", 1);
  st_warn("w %s", "x");
  st_info("i");
  st_debug("d\nsecond");
}

static void test_levels(void **state) {
  assert_int_equal(st_log_level_parse("debug"), ST_LOG_DEBUG);
  assert_int_equal(st_log_level_parse("warning"), ST_LOG_WARN);
  assert_int_equal(st_log_level_parse("loud"), -1);
  assert_int_equal(st_log_level_parse(NULL), -1);
  st_log_set_level(ST_LOG_WARN);
  assert_string_equal(capture(emit_all), "strata: error: e 1\nstrata: warn: w x\n");
  setenv("STRATA_LOG", "debug", 1);
  st_log_init_from_env();
  assert_int_equal(st_log_get_level(), ST_LOG_DEBUG);
  assert_string_equal(capture(emit_all),
                      "strata: error: e 1\nstrata: warn: w x\nstrata: i\nstrata: debug: d\nsecond\n");
  setenv("STRATA_LOG", "nonsense", 1);
  st_log_init_from_env(); /* an unknown value keeps the level */
  assert_int_equal(st_log_get_level(), ST_LOG_DEBUG);
  st_log_set_level(99);
  assert_int_equal(st_log_get_level(), ST_LOG_TRACE);
  assert_true(st_log_enabled(ST_LOG_TRACE));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_levels)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
