/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 against known vectors; strict hex parsing. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "digest.h"

static void test_vectors(void **state) {
  st_digest d;
  char hex[ST_DIGEST_HEX_LEN + 1];
  st_sha256(&d, "", 0);
  assert_string_equal(st_digest_hex(&d, hex),
                      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  st_sha256(&d, "abc", 3);
  assert_string_equal(st_digest_hex(&d, hex),
                      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_streaming_equals_oneshot(void **state) {
  uint8_t buf[100000];
  tu_random(buf, sizeof buf, 7);
  st_digest a, b;
  st_sha256(&a, buf, sizeof buf);
  st_hasher *h = st_hasher_new();
  assert_non_null(h);
  for (size_t off = 0; off < sizeof buf; off += 777)
    st_hasher_update(h, buf + off, sizeof buf - off < 777 ? sizeof buf - off : 777);
  st_hasher_final(h, &b);
  assert_true(st_digest_equal(&a, &b));
  /* final resets: hashing again gives the same digest */
  st_hasher_update(h, buf, sizeof buf);
  st_hasher_final(h, &b);
  assert_true(st_digest_equal(&a, &b));
  st_hasher_free(h);
  st_hasher_free(NULL);
}

static void test_parse_strict(void **state) {
  const char *good = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  st_digest d, e;
  st_error err = {0};
  char hex[ST_DIGEST_HEX_LEN + 1], pref[80];
  assert_int_equal(st_digest_parse(&d, good, &err), ST_OK);
  assert_string_equal(st_digest_hex(&d, hex), good);
  snprintf(pref, sizeof pref, "sha256:%s", good);
  assert_int_equal(st_digest_parse(&e, pref, &err), ST_OK);
  assert_true(st_digest_equal(&d, &e));
  const char *bad[] = {
      "",
      "abc",
      "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", /* upper case */
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad0", /* 65 */
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a",   /* 63 */
      "ga7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      " ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a",
      "sha512:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    st_digest untouched = d;
    assert_int_equal(st_digest_parse(&untouched, bad[i], &err), ST_EINVAL);
    assert_true(st_digest_equal(&untouched, &d)); /* out written only on success */
    assert_non_null(strstr(err.msg, "invalid digest"));
  }
  assert_int_equal(st_digest_parse(&d, NULL, &err), ST_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vectors),
      cmocka_unit_test(test_streaming_equals_oneshot),
      cmocka_unit_test(test_parse_strict),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
