/* SPDX-License-Identifier: Apache-2.0 */
/* Registry authentication helpers: WWW-Authenticate challenges (Basic,
 * Bearer with quoted and escaped values, several challenges, malformed
 * ones), the scope set a token is asked for (merging actions, coverage of a
 * challenged scope) and the token server's JSON answer. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry-auth.h"

static int parse(st_oci_challenge *c, const char *text) {
  st_error err = {0};
  return st_oci_challenge_parse(c, text, strlen(text), &err);
}

static void test_challenge(void **state) {
  st_oci_challenge c;
  assert_int_equal(parse(&c, "Basic realm=\"strata-test\""), ST_OK);
  assert_int_equal(c.scheme, ST_OCI_AUTH_BASIC);
  assert_string_equal(c.realm, "strata-test");
  assert_int_equal(parse(&c, "basic"), ST_OK);
  assert_int_equal(c.scheme, ST_OCI_AUTH_BASIC);
  assert_int_equal(parse(&c, "Bearer realm=\"https://auth.example/token\",service=\"reg.example\","
                             "scope=\"repository:team/app:pull,push\",error=\"insufficient_scope\""),
                   ST_OK);
  assert_int_equal(c.scheme, ST_OCI_AUTH_BEARER);
  assert_string_equal(c.realm, "https://auth.example/token");
  assert_string_equal(c.service, "reg.example");
  assert_string_equal(c.scope, "repository:team/app:pull,push");
  assert_string_equal(c.error, "insufficient_scope");
  /* spaces around '=' and ',', token values, escapes, unknown parameters */
  assert_int_equal(parse(&c, "BEARER  realm = \"http://a/t?x=1\" , service=reg , foo=\"b\\\"ar\","
                             "scope=\"a:b:pull repository:c:d:push\""), ST_OK);
  assert_string_equal(c.realm, "http://a/t?x=1");
  assert_string_equal(c.service, "reg");
  assert_string_equal(c.scope, "a:b:pull repository:c:d:push");
  assert_string_equal(c.error, "");
  /* only the first challenge is read */
  assert_int_equal(parse(&c, "Basic realm=\"one\", Bearer realm=\"two\""), ST_OK);
  assert_int_equal(c.scheme, ST_OCI_AUTH_BASIC);
  assert_string_equal(c.realm, "one");
  static const char *const bad[] = {
      "", "   ", "Digest realm=\"x\"", "Bearer", "Bearer service=\"s\"",
      "Bearer realm=\"unterminated", "Bearer realm=\"x\" service=\"y\"", "Bearer realm=",
      "Bearer realm=\"a\",,", "Bearer realm=\"a\x01\"", "Bearer ,realm=\"a\"",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_int_equal(parse(&c, bad[i]), ST_EFORMAT);
  char big[3000] = "Bearer realm=\"";
  memset(big + strlen(big), 'a', 2000);
  strcat(big, "\"");
  assert_int_equal(parse(&c, big), ST_ELIMIT);
}

static void test_scopes(void **state) {
  st_oci_scopes set = {0};
  st_error err = {0};
  bool changed = false;
  assert_int_equal(st_oci_scopes_add(&set, "repository:team/app:pull,push", &changed, &err), ST_OK);
  assert_true(changed);
  assert_true(st_oci_scopes_cover(&set, "repository:team/app:pull"));
  assert_true(st_oci_scopes_cover(&set, "repository:team/app:push,pull"));
  assert_false(st_oci_scopes_cover(&set, "repository:team/app:delete"));
  assert_false(st_oci_scopes_cover(&set, "repository:team/other:pull"));
  assert_int_equal(st_oci_scopes_add(&set, "repository:team/app:pull", &changed, &err), ST_OK);
  assert_false(changed);
  /* a new action of a known resource, a new resource with ':' in its name */
  assert_int_equal(st_oci_scopes_add(&set, "repository:team/app:delete  repository:h:5000/x:pull",
                                     &changed, &err), ST_OK);
  assert_true(changed);
  assert_int_equal(set.n, 2);
  assert_string_equal(set.s[0].actions, "pull,push,delete");
  assert_string_equal(set.s[1].resource, "repository:h:5000/x");
  assert_true(st_oci_scopes_cover(&set, "repository:h:5000/x:pull repository:team/app:delete"));
  assert_true(st_oci_scopes_cover(&set, ""));
  static const char *const bad[] = {"repository", "repository:x", ":x:pull", "repository:x:",
                                    "repository::pull", "a:b\"c:pull"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(st_oci_scopes_add(&set, bad[i], NULL, &err), ST_EFORMAT);
    assert_false(st_oci_scopes_cover(&set, bad[i]));
  }
  for (int i = 0; i < ST_OCI_SCOPES_MAX; i++) {
    char s[64];
    snprintf(s, sizeof s, "repository:r%d:pull", i);
    int rc = st_oci_scopes_add(&set, s, NULL, &err);
    assert_int_equal(rc, i < ST_OCI_SCOPES_MAX - 2 ? ST_OK : ST_ELIMIT);
  }
}

static int token(const char *json, char **out, long *exp) {
  st_error err = {0};
  return st_oci_token_parse(out, exp, json, strlen(json), &err);
}

static void test_token(void **state) {
  char *t = NULL;
  long exp = 0;
  assert_int_equal(token("{\"token\":\"abc.def.ghi\",\"expires_in\":300}", &t, &exp), ST_OK);
  assert_string_equal(t, "abc.def.ghi");
  assert_int_equal(exp, 300);
  free(t);
  assert_int_equal(token("{\"access_token\":\"xyz\",\"token\":\"\"}", &t, &exp), ST_OK);
  assert_string_equal(t, "xyz");
  assert_int_equal(exp, 60);
  free(t);
  static const char *const bad[] = {"", "[]", "{}", "{\"token\":3}", "{\"token\":\"a b\"}",
                                    "{\"token\":\"a\\nb\"}", "{\"token\":\"a\\u0000b\"}", "{\"token\""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_int_equal(token(bad[i], &t, &exp), ST_EFORMAT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_challenge),
      cmocka_unit_test(test_scopes),
      cmocka_unit_test(test_token),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
