/* SPDX-License-Identifier: Apache-2.0 */
/* The digest map keeps every key through growth. */
#include "testutil.h"

#include "dset.h"

static void test_insert_get_grow(void **state) {
  st_dset *s = st_dset_new();
  assert_non_null(s);
  enum { N = 20000 };
  for (uint64_t i = 0; i < N; i++) {
    st_digest d;
    st_sha256(&d, &i, sizeof i);
    assert_int_equal(st_dset_insert(s, &d, i * 3), 1);
  }
  assert_int_equal(st_dset_count(s), N);
  for (uint64_t i = 0; i < N; i++) {
    st_digest d;
    uint64_t v = 0;
    st_sha256(&d, &i, sizeof i);
    assert_true(st_dset_get(s, &d, &v));
    assert_int_equal(v, i * 3);
    assert_int_equal(st_dset_insert(s, &d, 1), 0); /* present: value kept */
    assert_true(st_dset_get(s, &d, &v));
    assert_int_equal(v, i * 3);
  }
  uint64_t missing = N + 1;
  st_digest d;
  st_sha256(&d, &missing, sizeof missing);
  assert_false(st_dset_get(s, &d, NULL));
  st_dset_clear(s);
  assert_int_equal(st_dset_count(s), 0);
  missing = 0;
  st_sha256(&d, &missing, sizeof missing);
  assert_false(st_dset_get(s, &d, NULL));
  st_dset_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_insert_get_grow)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
