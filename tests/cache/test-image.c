/* SPDX-License-Identifier: Apache-2.0 */
/* Image manifests, tags, build keys and overlay composition. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "compose.h"
#include "image.h"

static st_store *mem_store(void) {
  st_backend *b = NULL;
  st_store *s = NULL;
  st_store_config cfg = st_store_config_default();
  assert_int_equal(st_backend_mem_new(&b, NULL), 0);
  assert_int_equal(st_store_init_backend(b, &cfg, NULL), 0);
  assert_int_equal(st_store_open_backend(&s, b, NULL), 0);
  return s;
}

static st_kv kv(const char *k, const char *v) { return (st_kv){strdup(k), strdup(v)}; }

static void test_manifest_roundtrip_and_tags(void **state) {
  st_store *s = mem_store();
  st_error err = {0};
  st_image *img = calloc(1, sizeof *img);
  img->n_layers = 2;
  img->layers = calloc(2, sizeof *img->layers);
  st_sha256(&img->layers[0].digest, "a", 1);
  img->layers[0].name = strdup("base");
  img->layers[0].size = 10;
  st_sha256(&img->layers[1].digest, "b", 1);
  img->layers[1].name = strdup("tools");
  img->n_env = 2;
  img->env = calloc(2, sizeof *img->env);
  img->env[0] = kv("PATH", "/bin");
  img->env[1] = kv("CUDA_HOME", "/usr/local/cuda");
  img->n_labels = 1;
  img->labels = calloc(1, sizeof *img->labels);
  img->labels[0] = kv("cuda", "12.4");
  img->workdir = strdup("/workspace");
  img->n_entrypoint = 1;
  img->entrypoint = calloc(1, sizeof(char *));
  img->entrypoint[0] = strdup("/bin/bash");
  uint8_t *buf = NULL;
  size_t len;
  assert_int_equal(st_image_encode(img, &buf, &len, &err), ST_EINVAL); /* env not sorted */
  assert_int_equal(st_image_normalize(img, &err), 0);
  st_digest d, d2;
  assert_int_equal(st_image_save(s, img, &d, &err), 0);
  st_image *back = NULL;
  assert_int_equal(st_image_load(&back, s, &d, &err), 0);
  assert_int_equal(back->n_layers, 2);
  assert_string_equal(back->layers[1].name, "tools");
  assert_true(st_digest_equal(&back->layers[0].digest, &img->layers[0].digest));
  assert_string_equal(st_kv_get(back->env, back->n_env, "PATH"), "/bin");
  assert_string_equal(back->env[0].key, "CUDA_HOME");
  assert_string_equal(back->workdir, "/workspace");
  assert_string_equal(back->entrypoint[0], "/bin/bash");
  assert_int_equal(st_image_save(s, back, &d2, &err), 0);
  assert_true(st_digest_equal(&d, &d2)); /* deterministic */
  /* a repeated key is refused */
  free(back->labels[0].key);
  back->labels[0].key = strdup("cuda");
  back->n_env = 2;
  free(back->env[1].key);
  back->env[1].key = strdup("CUDA_HOME");
  assert_int_equal(st_image_normalize(back, &err), ST_EINVAL);
  st_image_free(back);
  st_image_free(img);

  /* tags */
  assert_int_equal(st_tag_set(s, "org/pytorch", "2.7-cu124", &d, &err), 0);
  assert_int_equal(st_tag_set(s, "org/pytorch", "2.5-cu121", &d, &err), 0);
  assert_int_equal(st_image_resolve(s, "org/pytorch:2.7-cu124", &d2, &err), 0);
  assert_true(st_digest_equal(&d, &d2));
  char ref[80], hex[65];
  snprintf(ref, sizeof ref, "sha256:%s", st_digest_hex(&d, hex));
  assert_int_equal(st_image_resolve(s, ref, &d2, &err), 0);
  assert_int_equal(st_image_resolve(s, "org/pytorch:nope", &d2, &err), ST_ENOENT);
  assert_non_null(strstr(err.msg, "org/pytorch:nope not found"));
  const char *bad[] = {"Upper:1", "x", "a:", ":b", "a/../b:1", "a:-x", "/a:1", "a:b/c"};
  char *n = NULL, *t = NULL;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(st_image_ref_parse(bad[i], &n, &t, &err), ST_EINVAL);
  assert_int_equal(st_image_ref_parse("reg.io/a-b/c_d:V1.2-x", &n, &t, &err), 0);
  assert_string_equal(n, "reg.io/a-b/c_d");
  assert_string_equal(t, "V1.2-x");
  free(n);
  free(t);
  assert_int_equal(st_tag_delete(s, "org/pytorch", "2.5-cu121", &err), 0);
  assert_int_equal(st_tag_delete(s, "org/pytorch", "2.5-cu121", &err), ST_ENOENT);
  /* keys */
  st_digest key, layer;
  st_sha256(&key, "key", 3);
  assert_int_equal(st_build_key_get(s, &key, &layer, &err), ST_ENOENT);
  assert_int_equal(st_build_key_set(s, &key, &d, &err), 0);
  assert_int_equal(st_build_key_get(s, &key, &layer, &err), 0);
  assert_true(st_digest_equal(&layer, &d));
  st_store_free(s);
}

static int count_tags(const char *name, const char *tag, const st_digest *d, void *ud) {
  char *seen = ud;
  strcat(seen, name);
  strcat(seen, ":");
  strcat(seen, tag);
  strcat(seen, " ");
  return 0;
}

static void test_tag_list_sorted(void **state) {
  char *dir = tu_mkdtemp();
  st_store *s = NULL;
  st_error err = {0};
  assert_int_equal(st_store_open(&s, dir, ST_STORE_CREATE, &err), ST_ENOENT); /* exists */
  char sdir[512];
  snprintf(sdir, sizeof sdir, "%s/s", dir);
  assert_int_equal(st_store_open(&s, sdir, ST_STORE_CREATE, &err), 0);
  st_digest d;
  st_sha256(&d, "x", 1);
  assert_int_equal(st_tag_set(s, "b", "1", &d, &err), 0);
  assert_int_equal(st_tag_set(s, "a/x", "2", &d, &err), 0);
  assert_int_equal(st_tag_set(s, "a/x", "1", &d, &err), 0);
  assert_int_equal(st_tag_set(s, "a", "9", &d, &err), 0);
  char seen[256] = "";
  assert_int_equal(st_tag_list(s, count_tags, seen, &err), 0);
  assert_string_equal(seen, "a:9 a/x:1 a/x:2 b:1 ");
  st_store_free(s);
  tu_rmtree(dir);
  free(dir);
}

/* ---- composition ---- */

static void add(st_layer_index *idx, const char *path, st_entry_type type, const char *target,
                uint32_t content) {
  st_entry e = {.type = type, .mode = type == ST_ENTRY_DIR ? 0755 : 0644};
  e.path = strdup(path);
  if (target)
    e.target = strdup(target);
  if (content) {
    e.size = content;
    e.n_chunks = 1;
    e.chunks = calloc(1, sizeof *e.chunks);
    e.chunks[0].size = content;
    st_sha256(&e.chunks[0].digest, &content, sizeof content);
  }
  assert_int_equal(st_layer_index_add(idx, &e, NULL), 0);
}

static st_layer_index *layer(void) {
  st_chunk_params p = st_chunk_params_default();
  return st_layer_index_new(&p);
}

static void finish(st_layer_index *idx) {
  st_entry root = {.type = ST_ENTRY_DIR, .mode = 0755};
  assert_int_equal(st_layer_index_normalize(idx, &root, NULL, NULL), 0);
  assert_int_equal(st_layer_index_validate(idx, NULL), 0);
}

static void test_compose_overlay_rules(void **state) {
  st_layer_index *l0 = layer(), *l1 = layer(), *l2 = layer();
  add(l0, "etc/motd", ST_ENTRY_REGULAR, NULL, 1);
  add(l0, "etc/keep", ST_ENTRY_REGULAR, NULL, 2);
  add(l0, "opt/a/x", ST_ENTRY_REGULAR, NULL, 3);
  add(l0, "opt/b/y", ST_ENTRY_REGULAR, NULL, 4);
  add(l0, "lib/data", ST_ENTRY_REGULAR, NULL, 5);
  add(l0, "lib/link", ST_ENTRY_HARDLINK, "lib/data", 0);
  add(l0, "var/cache/z", ST_ENTRY_REGULAR, NULL, 6);
  add(l0, "var/cache-other", ST_ENTRY_REGULAR, NULL, 7);
  finish(l0);
  add(l1, "etc/motd", ST_ENTRY_WHITEOUT, NULL, 0);   /* delete a file */
  add(l1, "opt/a", ST_ENTRY_WHITEOUT, NULL, 0);      /* delete a subtree */
  add(l1, "opt/b", ST_ENTRY_REGULAR, NULL, 8);       /* a file replaces a dir */
  add(l1, "lib/data", ST_ENTRY_REGULAR, NULL, 9);    /* replaces a link target */
  add(l1, "var/cache", ST_ENTRY_DIR, NULL, 0);
  finish(l1);
  add(l2, "var/cache/new", ST_ENTRY_REGULAR, NULL, 10);
  finish(l2);
  /* make l2's var/cache opaque: hides l0's var/cache/z, not var/cache-other */
  for (size_t i = 0; i < st_layer_index_count(l2); i++)
    if (!strcmp(st_layer_index_entry(l2, i)->path, "var/cache"))
      st_layer_index_entry_mut(l2, i)->opaque = true;
  st_layer_index *const idxs[] = {l0, l1, l2};
  st_layer_index *out = NULL;
  st_error err = {0};
  assert_int_equal(st_compose_indexes(idxs, 3, &out, &err), 0);
  assert_null(st_layer_index_find(out, "etc/motd"));
  assert_non_null(st_layer_index_find(out, "etc/keep"));
  assert_null(st_layer_index_find(out, "opt/a"));
  assert_null(st_layer_index_find(out, "opt/a/x"));
  assert_int_equal(st_layer_index_find(out, "opt/b")->type, ST_ENTRY_REGULAR);
  assert_null(st_layer_index_find(out, "opt/b/y"));
  assert_int_equal(st_layer_index_find(out, "lib/data")->size, 9);
  const st_entry *link = st_layer_index_find(out, "lib/link");
  assert_int_equal(link->type, ST_ENTRY_REGULAR); /* keeps the old content */
  assert_int_equal(link->size, 5);
  assert_null(st_layer_index_find(out, "var/cache/z"));
  assert_non_null(st_layer_index_find(out, "var/cache/new"));
  assert_non_null(st_layer_index_find(out, "var/cache-other"));
  assert_false(st_layer_index_find(out, "var/cache")->opaque);
  for (size_t i = 0; i < st_layer_index_count(out); i++)
    assert_int_not_equal(st_layer_index_entry(out, i)->type, ST_ENTRY_WHITEOUT);
  st_layer_index_free(out);
  st_layer_index_free(l0);
  st_layer_index_free(l1);
  st_layer_index_free(l2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_manifest_roundtrip_and_tags),
      cmocka_unit_test(test_tag_list_sorted),
      cmocka_unit_test(test_compose_overlay_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
