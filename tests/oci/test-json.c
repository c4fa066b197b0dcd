/* SPDX-License-Identifier: Apache-2.0 */
/* OCI JSON: parsing index, manifest and config, and docker archives'
 * manifest.json (and refusing malformed ones), deterministic config and
 * manifest output that parses back, and index.json updates that replace a
 * tag and keep the rest. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "oci.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"

static const char index_text[] =
    "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" ST_OCI_MT_MANIFEST "\","
    "\"digest\":\"" D1 "\",\"size\":10,\"annotations\":{\"" ST_OCI_REF_NAME "\":\"v1\"}},"
    "{\"mediaType\":\"" ST_OCI_MT_MANIFEST "\",\"digest\":\"" D2 "\",\"size\":20}]}";

static int parse_index(const char *text, st_oci_index **out, st_error *err) {
  return st_oci_index_parse(out, (const uint8_t *)text, strlen(text), err);
}

static void test_index(void **state) {
  st_oci_index *x = NULL;
  st_error err = {0};
  assert_int_equal(parse_index(index_text, &x, &err), ST_OK);
  assert_int_equal(x->n, 2);
  assert_string_equal(x->manifests[0].ref_name, "v1");
  assert_null(x->manifests[1].ref_name);
  assert_int_equal(x->manifests[1].size, 20);
  st_oci_index_free(x);
  static const char *const bad[] = {
      "", "[]", "{\"schemaVersion\":2}", "{\"schemaVersion\":1,\"manifests\":[]}",
      "{\"schemaVersion\":2,\"manifests\":[{}]}",
      "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"x\",\"digest\":\"md5:00\",\"size\":1}]}",
      "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"x\",\"digest\":\"" D1 "\",\"size\":-1}]}",
      "{\"schemaVersion\":2,\"schemaVersion\":2,\"manifests\":[]}", /* duplicate key */
      "{\"schemaVersion\":2,\"manifests\":[]",
  };
  for (size_t i = 0; i < ST_ARRAY_SIZE(bad); i++) {
    x = NULL;
    st_error_clear(&err);
    assert_int_equal(parse_index(bad[i], &x, &err), ST_EFORMAT);
    assert_null(x);
    assert_true(err.msg[0] != '\0' && !strchr(err.msg, '\n'));
  }
}

static void test_manifest_and_config(void **state) {
  static const char man[] =
      "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" ST_OCI_MT_CONFIG "\",\"digest\":\"" D1
      "\",\"size\":5},\"layers\":[{\"mediaType\":\"" ST_OCI_MT_LAYER_GZIP "\",\"digest\":\"" D2
      "\",\"size\":7}]}";
  st_oci_manifest *m = NULL;
  st_error err = {0};
  assert_int_equal(st_oci_manifest_parse(&m, (const uint8_t *)man, strlen(man), &err), ST_OK);
  assert_int_equal(m->n_layers, 1);
  assert_int_equal(m->layers[0].size, 7);
  st_oci_manifest_free(m);
  static const char badlayer[] =
      "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"" D1 "\",\"size\":5},"
      "\"layers\":[{\"mediaType\":\"text/plain\",\"digest\":\"" D2 "\",\"size\":7}]}";
  m = NULL;
  assert_int_equal(st_oci_manifest_parse(&m, (const uint8_t *)badlayer, strlen(badlayer), &err),
                   ST_EFORMAT);
  assert_non_null(strstr(err.msg, "unsupported media type"));

  static const char cfg[] =
      "{\"config\":{\"Env\":[\"A=1\",\"B=x=y\"],\"Entrypoint\":[\"/bin/sh\"],\"Cmd\":[\"-c\"],"
      "\"WorkingDir\":\"/w\",\"Labels\":{\"z\":\"1\",\"a\":\"2\"}},"
      "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D1 "\"]}}";
  st_oci_config *c = NULL;
  assert_int_equal(st_oci_config_parse(&c, (const uint8_t *)cfg, strlen(cfg), &err), ST_OK);
  assert_int_equal(c->n_env, 2);
  assert_string_equal(c->env[1].key, "B");
  assert_string_equal(c->env[1].value, "x=y");
  assert_true(c->has_entrypoint && c->has_cmd);
  assert_string_equal(c->workdir, "/w");
  assert_string_equal(c->labels[0].key, "a"); /* sorted */
  assert_int_equal(c->n_diff_ids, 1);
  st_oci_config_free(c);
  static const char badenv[] = "{\"config\":{\"Env\":[\"NOEQUALS\"]},\"rootfs\":{\"diff_ids\":[]}}";
  c = NULL;
  assert_int_equal(st_oci_config_parse(&c, (const uint8_t *)badenv, strlen(badenv), &err),
                   ST_EFORMAT);
  assert_null(c);
}

static void test_writers(void **state) {
  st_image img = {0};
  st_image_layer layers[2] = {{.name = "base"}, {.name = "top"}};
  st_kv env[1] = {{"PATH", "/bin"}};
  img.layers = layers;
  img.n_layers = 2;
  img.env = env;
  img.n_env = 1;
  st_digest ids[2];
  st_sha256(&ids[0], "a", 1);
  st_sha256(&ids[1], "b", 1);
  char *a = NULL, *b = NULL;
  size_t la, lb;
  st_error err = {0};
  assert_int_equal(st_oci_config_json(&img, ids, &a, &la, &err), ST_OK);
  assert_int_equal(st_oci_config_json(&img, ids, &b, &lb, &err), ST_OK);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la); /* deterministic */
  st_oci_config *c = NULL;
  assert_int_equal(st_oci_config_parse(&c, (const uint8_t *)a, la, &err), ST_OK);
  assert_int_equal(c->n_diff_ids, 2);
  assert_true(st_digest_equal(&c->diff_ids[1], &ids[1]));
  assert_string_equal(c->env[0].value, "/bin");
  st_oci_config_free(c);
  free(a);
  free(b);

  /* index.json: the new v1 replaces the old v1, the untagged entry stays */
  st_oci_desc d = {.media_type = ST_OCI_MT_MANIFEST, .size = 3, .ref_name = "v1"};
  st_sha256(&d.digest, "m", 1);
  char *out = NULL;
  size_t len;
  assert_int_equal(st_oci_index_json((const uint8_t *)index_text, strlen(index_text), &d, &out,
                                     &len, &err), ST_OK);
  st_oci_index *x = NULL;
  assert_int_equal(st_oci_index_parse(&x, (const uint8_t *)out, len, &err), ST_OK);
  assert_int_equal(x->n, 2);
  assert_null(x->manifests[0].ref_name);
  assert_string_equal(x->manifests[1].ref_name, "v1");
  assert_true(st_digest_equal(&x->manifests[1].digest, &d.digest));
  st_oci_index_free(x);
  free(out);
  /* a broken index.json is not replaced */
  assert_int_equal(st_oci_index_json((const uint8_t *)"{", 1, &d, &out, &len, &err), ST_EFORMAT);
}

static void test_docker_manifest(void **state) {
  static const char text[] =
      "[{\"Config\":\"c.json\",\"RepoTags\":[\"a:1\",\"docker.io/b/c:2\"],"
      "\"Layers\":[\"l1/layer.tar\",\"l2.tar\"]},"
      "{\"Config\":\"blobs/sha256/x\",\"RepoTags\":null,\"Layers\":[]}]";
  st_docker_manifest *m = NULL;
  st_error err = {0};
  assert_int_equal(st_docker_manifest_parse(&m, (const uint8_t *)text, strlen(text), &err),
                   ST_OK);
  assert_int_equal(m->n, 2);
  assert_string_equal(m->images[0].config, "c.json");
  assert_int_equal(m->images[0].n_repo_tags, 2);
  assert_string_equal(m->images[0].repo_tags[1], "docker.io/b/c:2");
  assert_int_equal(m->images[0].n_layers, 2);
  assert_string_equal(m->images[0].layers[0], "l1/layer.tar");
  assert_int_equal(m->images[1].n_repo_tags, 0);
  assert_int_equal(m->images[1].n_layers, 0);
  st_docker_manifest_free(m);
  static const char *const bad[] = {
      "", "{}", "[]", "[5]", "[{\"Layers\":[]}]", "[{\"Config\":\"c\"}]",
      "[{\"Config\":5,\"Layers\":[]}]", "[{\"Config\":\"c\",\"Layers\":[5]}]",
      "[{\"Config\":\"c\",\"Layers\":\"x\"}]",
      "[{\"Config\":\"c\",\"RepoTags\":{},\"Layers\":[]}]",
      "[{\"Config\":\"c\",\"Config\":\"d\",\"Layers\":[]}]", "[{\"Config\":\"c\",\"Layers\":[]}",
  };
  for (size_t i = 0; i < ST_ARRAY_SIZE(bad); i++) {
    m = NULL;
    st_error_clear(&err);
    assert_int_equal(st_docker_manifest_parse(&m, (const uint8_t *)bad[i], strlen(bad[i]), &err),
                     ST_EFORMAT);
    assert_null(m);
    assert_true(err.msg[0] != '\0' && !strchr(err.msg, '\n'));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_index),
      cmocka_unit_test(test_manifest_and_config),
      cmocka_unit_test(test_writers),
      cmocka_unit_test(test_docker_manifest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
