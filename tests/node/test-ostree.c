/* SPDX-License-Identifier: Apache-2.0 */
/* The node's OSTree adapter: layers committed and composed into an image
 * commit by the dirtree merge give, checked out, exactly the tree that the
 * reference composition (st_compose_indexes + unpack) gives, through
 * whiteouts, opaque directories and file<->directory replacements; failures
 * leave no ref. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compose.h"
#include "ostree-repo.h"
#include "unpack.h"

typedef struct {
  char *dir;
  st_store *store;
  st_ostree *repo;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp();
  char path[4096];
  snprintf(path, sizeof path, "%s/store", f->dir);
  assert_int_equal(st_store_open(&f->store, path, ST_STORE_CREATE, NULL), 0);
  snprintf(path, sizeof path, "%s/repo", f->dir);
  st_error err = {0};
  assert_int_equal(st_ostree_open(&f->repo, path, &err), 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  st_ostree_free(f->repo);
  st_store_free(f->store);
  tu_rmtree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

/* Layer description: one entry a line, "TYPE PATH [ARG]": f PATH CONTENT,
 * d PATH, o PATH (opaque dir), l PATH TARGET (symlink), h PATH TARGET
 * (hardlink), w PATH (whiteout). */
static void make_layer(fixture *f, const char *const *lines, st_digest *out) {
  st_layer_writer *w = NULL;
  st_error err = {0};
  assert_int_equal(st_layer_writer_new(&w, f->store, 0, &err), 0);
  for (size_t i = 0; lines[i]; i++) {
    char type, path[256] = "", arg[256] = "";
    assert_true(sscanf(lines[i], "%c %255s %255s", &type, path, arg) >= 2);
    st_entry e = {0};
    e.path = strdup(path);
    e.mode = type == 'f' || type == 'h' ? 0644 : 0755;
    switch (type) {
    case 'f':
      e.type = ST_ENTRY_REGULAR;
      assert_int_equal(st_layer_writer_begin_file(w, &e, &err), 0);
      assert_int_equal(st_layer_writer_write(w, arg, strlen(arg), &err), 0);
      assert_int_equal(st_layer_writer_end_file(w, &err), 0);
      continue;
    case 'd': e.type = ST_ENTRY_DIR; break;
    case 'o': e.type = ST_ENTRY_DIR; e.opaque = true; break;
    case 'l': e.type = ST_ENTRY_SYMLINK; e.target = strdup(arg); e.mode = 0777; break;
    case 'h': e.type = ST_ENTRY_HARDLINK; e.target = strdup(arg); break;
    case 'w': e.type = ST_ENTRY_WHITEOUT; e.mode = 0; break;
    default: fail();
    }
    assert_int_equal(st_layer_writer_add(w, &e, &err), 0);
  }
  assert_int_equal(st_layer_writer_finish(w, out, NULL, &err), 0);
  st_layer_writer_free(w);
}

/* Commits the layers and the image, checks it out, and compares with the
 * reference composition unpacked. */
static void check_image(fixture *f, const st_digest *layers, size_t n, const char *name) {
  st_error err = {0};
  for (size_t i = 0; i < n; i++) {
    int has = st_ostree_has_layer(f->repo, &layers[i], &err);
    assert_true(has >= 0);
    if (!has)
      assert_int_equal(st_ostree_write_layer(f->repo, f->store, &layers[i], 2, NULL, &err), 0);
    assert_int_equal(st_ostree_has_layer(f->repo, &layers[i], &err), 1);
  }
  st_digest img;
  st_sha256(&img, name, strlen(name));
  assert_int_equal(st_ostree_write_image(f->repo, &img, layers, n, &err), 0);
  assert_int_equal(st_ostree_has_image(f->repo, &img, &err), 1);
  char co[4096], ref[4096];
  snprintf(co, sizeof co, "%s/co-%s", f->dir, name);
  snprintf(ref, sizeof ref, "%s/ref-%s", f->dir, name);
  if (st_ostree_checkout_image(f->repo, &img, AT_FDCWD, co, &err) != 0)
    fail_msg("checkout: %s", err.msg);
  st_layer_index *composed = NULL;
  assert_int_equal(st_compose(f->store, layers, n, &composed, &err), 0);
  st_unpack_opts uo = st_unpack_opts_default();
  assert_int_equal(st_layer_unpack(f->store, composed, ref, &uo, NULL, &err), 0);
  st_layer_index_free(composed);
  /* same paths, types, modes, contents and link targets */
  int rc = tu_sh("cd '%s' && find . -printf '%%P %%y %%m %%l\\n' | sort >../m-co-%s && "
                 "cd '%s' && find . -printf '%%P %%y %%m %%l\\n' | sort >../m-ref-%s && "
                 "diff -u ../m-ref-%s ../m-co-%s && diff -r --no-dereference '%s' '%s'",
                 co, name, ref, name, name, name, ref, co);
  assert_int_equal(rc, 0);
}

static void test_compose_matches_reference(void **state) {
  fixture *f = *state;
  static const char *const l0[] = {
      "d a", "d a/b", "f a/f1 one", "f a/b/f2 two", "f x ex", "d d", "f d/inner in",
      "l sym a/f1", "h a/h a/f1", "d opq", "f opq/old old", "d y", "f y/z zed", "d keep",
      "f keep/k k", NULL};
  static const char *const l1[] = {
      "w a/f1", "w a/b", "f d replaced-dir", "d x", "f x/new new", "o opq", "f opq/new new",
      "f y/z zed2", "w nope", "w keep/none/deeper", NULL};
  static const char *const l2[] = {"f a/b/f3 three", "w y", "f d2 file", "w x/new", NULL};
  st_digest layers[3];
  make_layer(f, l0, &layers[0]);
  make_layer(f, l1, &layers[1]);
  make_layer(f, l2, &layers[2]);
  check_image(f, layers, 1, "one");
  check_image(f, layers, 2, "two");
  check_image(f, layers, 3, "three");
  /* the same layer commits serve another image: only the union is new */
  st_digest other[2] = {layers[0], layers[2]};
  check_image(f, other, 2, "skip");
}

static void test_missing_chunk_commits_nothing(void **state) {
  fixture *f = *state;
  static const char *const l0[] = {"d a", "f a/f1 content-of-the-file", NULL};
  st_digest layer;
  make_layer(f, l0, &layer);
  st_digest chunk;
  st_sha256(&chunk, "content-of-the-file", strlen("content-of-the-file"));
  st_error err = {0};
  assert_int_equal(st_store_del(f->store, ST_KIND_CHUNK, &chunk, &err), 0);
  assert_int_equal(st_ostree_write_layer(f->repo, f->store, &layer, 2, NULL, &err), ST_ENOENT);
  char hex[ST_DIGEST_HEX_LEN + 1];
  assert_non_null(strstr(err.msg, st_digest_hex(&layer, hex)));
  assert_non_null(strstr(err.msg, "/a/f1"));
  assert_int_equal(st_ostree_has_layer(f->repo, &layer, &err), 0);
  /* an image over a layer that is not committed fails without a ref */
  st_digest img;
  st_sha256(&img, "img", 3);
  assert_int_equal(st_ostree_write_image(f->repo, &img, &layer, 1, &err), ST_ENOENT);
  assert_int_equal(st_ostree_has_image(f->repo, &img, &err), 0);
}

static void test_delete_and_prune(void **state) {
  fixture *f = *state;
  static const char *const l0[] = {"f big 0123456789abcdef", NULL};
  st_digest layer, img;
  make_layer(f, l0, &layer);
  check_image(f, &layer, 1, "prune");
  st_sha256(&img, "prune", 5);
  st_error err = {0};
  uint64_t freed = 0;
  assert_int_equal(st_ostree_prune(f->repo, &freed, &err), 0);
  assert_int_equal(freed, 0);
  assert_int_equal(st_ostree_delete_image(f->repo, &img, &err), 0);
  assert_int_equal(st_ostree_delete_layer(f->repo, &layer, &err), 0);
  assert_int_equal(st_ostree_delete_layer(f->repo, &layer, &err), 0); /* absent: fine */
  assert_int_equal(st_ostree_has_image(f->repo, &img, &err), 0);
  assert_int_equal(st_ostree_prune(f->repo, &freed, &err), 0);
  assert_true(freed > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_compose_matches_reference, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_chunk_commits_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_delete_and_prune, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
