/* SPDX-License-Identifier: Apache-2.0 */
/* Every ST_E* code has a name, a message and a gRPC status; helpers format
 * one-line messages. */
#include "testutil.h"

#include <errno.h>
#include <string.h>

#include "error.h"

static void test_every_code_is_described(void **state) {
  for (int code = 0; code >= ST_CODE_MIN; code--) {
    assert_string_not_equal(st_code_name(code), "E?");
    assert_string_not_equal(st_code_message(code), "unknown error");
    int g = st_code_grpc_status(code);
    assert_true(g >= 0 && g <= 16);
    assert_true(code == ST_OK ? g == 0 : g != 0);
  }
  assert_string_equal(st_code_name(ST_CODE_MIN - 1), "E?");
  assert_string_equal(st_code_name(1), "E?");
}

static void test_pinned_values(void **state) {
  /* These numbers are part of the API; changing one is a breaking change. */
  assert_int_equal(ST_EINVAL, -1);
  assert_int_equal(ST_ENOENT, -4);
  assert_int_equal(ST_ECORRUPT, -6);
  assert_int_equal(ST_EUNSAFE, -8);
  assert_int_equal(ST_ENOSPC, -9);
  assert_int_equal(ST_ELIMIT, -18);
  assert_int_equal(st_code_grpc_status(ST_ENOENT), 5);
  assert_int_equal(st_code_grpc_status(ST_ECORRUPT), 15);
  assert_int_equal(st_code_grpc_status(ST_EAUTH), 16);
  assert_int_equal(st_code_grpc_status(ST_EPERM), 7);
}

static void test_set_and_errno(void **state) {
  st_error err = {0};
  assert_int_equal(st_error_set(&err, ST_EFORMAT, "line %d: bad\nthing", 3), ST_EFORMAT);
  assert_int_equal(err.code, ST_EFORMAT);
  assert_string_equal(err.msg, "line 3: bad thing"); /* newline folded: one line */
  assert_int_equal(st_error_errno(&err, ENOSPC, "write %s", "x"), ST_ENOSPC);
  assert_string_equal(err.msg, "write x: No space left on device");
  assert_int_equal(st_error_prefix(&err, "store %s", "S"), ST_ENOSPC);
  assert_string_equal(err.msg, "store S: write x: No space left on device");
  assert_int_equal(st_error_set(NULL, ST_EIO, "ignored"), ST_EIO);
  assert_int_equal(st_code_from_errno(ENOENT), ST_ENOENT);
  assert_int_equal(st_code_from_errno(EACCES), ST_EPERM);
  assert_int_equal(st_code_from_errno(ELOOP), ST_EUNSAFE);
  assert_int_equal(st_code_from_errno(EXDEV), ST_EIO);
  st_error_clear(&err);
  assert_int_equal(err.code, 0);
  assert_string_equal(err.msg, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_code_is_described),
      cmocka_unit_test(test_pinned_values),
      cmocka_unit_test(test_set_and_errno),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
