/* SPDX-License-Identifier: Apache-2.0 */
/* Layer index: deterministic encoding, round trip, and rejection of every
 * kind of crafted or damaged index. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "format.pb-c.h"
#include "layer-index.h"

static st_chunk_params params(void) { return st_chunk_params_default(); }

static void add(st_layer_index *idx, const char *path, st_entry_type type, const char *target,
                uint64_t size) {
  st_entry e = {.type = type, .mode = type == ST_ENTRY_DIR ? 0755 : 0644, .uid = 1, .gid = 2};
  e.path = strdup(path);
  if (target)
    e.target = strdup(target);
  if (size) {
    e.size = size;
    e.n_chunks = 1;
    e.chunks = calloc(1, sizeof *e.chunks);
    e.chunks[0].size = (uint32_t)size;
    st_sha256(&e.chunks[0].digest, path, strlen(path));
  }
  assert_int_equal(st_layer_index_add(idx, &e, NULL), 0);
}

static st_layer_index *sample(int reverse) {
  st_chunk_params p = params();
  st_layer_index *idx = st_layer_index_new(&p);
  const char *dirs[] = {"", "usr", "usr/bin", "usr/lib"};
  if (!reverse)
    for (int i = 0; i < 4; i++)
      add(idx, dirs[i], ST_ENTRY_DIR, NULL, 0);
  add(idx, "usr/bin/python3", ST_ENTRY_REGULAR, NULL, 1234);
  add(idx, "usr/bin/python", ST_ENTRY_SYMLINK, "python3", 0);
  add(idx, "usr/lib/empty", ST_ENTRY_REGULAR, NULL, 0);
  add(idx, "usr/lib/x-link", ST_ENTRY_HARDLINK, "usr/bin/python3", 0);
  add(idx, "usr/lib/gone", ST_ENTRY_WHITEOUT, NULL, 0);
  if (reverse)
    for (int i = 3; i >= 0; i--)
      add(idx, dirs[i], ST_ENTRY_DIR, NULL, 0);
  st_entry *py = NULL;
  for (size_t i = 0; i < st_layer_index_count(idx); i++)
    if (!strcmp(st_layer_index_entry(idx, i)->path, "usr/bin/python3"))
      py = st_layer_index_entry_mut(idx, i);
  py->n_xattrs = 2;
  py->xattrs = calloc(2, sizeof *py->xattrs);
  py->xattrs[0] = (st_xattr){strdup("security.capability"), (uint8_t *)strdup("cap"), 3};
  py->xattrs[1] = (st_xattr){strdup("user.a"), (uint8_t *)strdup("v"), 1};
  st_layer_index_sort(idx);
  return idx;
}

struct diff_seen {
  int n;
  unsigned changes;
};

static int diff_cb(const st_entry *x, const st_entry *y, unsigned ch, void *ud) {
  struct diff_seen *seen = ud;
  seen->n++;
  seen->changes = ch;
  assert_non_null(x);
  assert_non_null(y);
  assert_string_equal(y->path, "usr");
  return 0;
}

static void test_deterministic_roundtrip(void **state) {
  st_layer_index *a = sample(0), *b = sample(1);
  uint8_t *ea = NULL, *eb = NULL, *ec = NULL;
  size_t la, lb, lc;
  st_error err = {0};
  assert_int_equal(st_layer_index_encode(a, &ea, &la, &err), 0);
  assert_int_equal(st_layer_index_encode(b, &eb, &lb, &err), 0);
  assert_int_equal(la, lb); /* insertion order does not matter once sorted */
  assert_memory_equal(ea, eb, la);
  st_layer_index *c = NULL;
  assert_int_equal(st_layer_index_decode(&c, ea, la, &err), 0);
  assert_int_equal(st_layer_index_count(c), st_layer_index_count(a));
  assert_int_equal(st_layer_index_encode(c, &ec, &lc, &err), 0);
  assert_int_equal(lc, la);
  assert_memory_equal(ec, ea, la);
  const st_entry *py = st_layer_index_find(c, "usr/bin/python3");
  assert_non_null(py);
  assert_int_equal(py->size, 1234);
  assert_int_equal(py->n_xattrs, 2);
  assert_string_equal(py->xattrs[1].name, "user.a");
  assert_int_equal(st_layer_index_content_bytes(c), 1234);
  /* diff: identical indexes have no changes; a mode change is reported */
  st_entry *m = st_layer_index_entry_mut(c, 1);
  m->mode = 0700;
  free(ec);
  ec = NULL;
  struct diff_seen seen = {0, 0};
  assert_int_equal(st_layer_index_diff(a, c, diff_cb, &seen), 0);
  assert_int_equal(seen.n, 1);
  assert_int_equal(seen.changes, ST_DIFF_MODE);
  free(ea);
  free(eb);
  st_layer_index_free(a);
  st_layer_index_free(b);
  st_layer_index_free(c);
}

/* Encodes entries straight through protobuf-c, bypassing validation, so the
 * decoder sees what an attacker could write. */
struct craft {
  const char *path;
  int type;
  const char *target;
  uint64_t size;
  uint32_t chunk_size;
  size_t digest_len;
};

static uint8_t *craft_index(const struct craft *c, size_t n, uint32_t version, size_t *len) {
  Strata__V1__Entry *ents = calloc(n, sizeof *ents);
  Strata__V1__Entry **entp = calloc(n, sizeof *entp);
  Strata__V1__ChunkRef *refs = calloc(n, sizeof *refs);
  Strata__V1__ChunkRef **refp = calloc(n, sizeof *refp);
  uint8_t digest[64] = {0};
  for (size_t i = 0; i < n; i++) {
    strata__v1__entry__init(&ents[i]);
    ents[i].path = (ProtobufCBinaryData){strlen(c[i].path), (uint8_t *)c[i].path};
    ents[i].type = c[i].type;
    ents[i].mode = c[i].type == 2 ? 0755 : 0644;
    if (c[i].target)
      ents[i].target = (ProtobufCBinaryData){strlen(c[i].target), (uint8_t *)c[i].target};
    ents[i].size = c[i].size;
    if (c[i].chunk_size) {
      strata__v1__chunk_ref__init(&refs[i]);
      refs[i].digest = (ProtobufCBinaryData){c[i].digest_len ? c[i].digest_len : 32, digest};
      refs[i].size = c[i].chunk_size;
      refp[i] = &refs[i];
      ents[i].n_chunks = 1;
      ents[i].chunks = &refp[i];
    }
    entp[i] = &ents[i];
  }
  Strata__V1__ChunkingParams cp = STRATA__V1__CHUNKING_PARAMS__INIT;
  cp.min = 16384;
  cp.avg = 65536;
  cp.max = 262144;
  Strata__V1__LayerIndex li = STRATA__V1__LAYER_INDEX__INIT;
  li.version = version;
  li.chunking = &cp;
  li.n_entries = n;
  li.entries = entp;
  *len = strata__v1__layer_index__get_packed_size(&li);
  uint8_t *buf = malloc(*len + 1);
  strata__v1__layer_index__pack(&li, buf);
  free(ents);
  free(entp);
  free(refs);
  free(refp);
  return buf;
}

static void expect_reject(const struct craft *c, size_t n, uint32_t version, int code,
                          const char *needle) {
  size_t len;
  uint8_t *buf = craft_index(c, n, version, &len);
  st_layer_index *idx = NULL;
  st_error err = {0};
  int rc = st_layer_index_decode(&idx, buf, len, &err);
  if (rc != code || !strstr(err.msg, needle))
    fail_msg("expected %d with '%s', got %d: %s", code, needle, rc, err.msg);
  assert_null(idx);
  free(buf);
}

#define REJECT(code, needle, ...)                                                                  \
  do {                                                                                             \
    const struct craft c_[] = {__VA_ARGS__};                                                       \
    expect_reject(c_, sizeof c_ / sizeof c_[0], 1, code, needle);                                  \
  } while (0)

static void test_rejects_crafted(void **state) {
  const struct craft root = {"", 2, NULL, 0, 0, 0};
  /* a valid one first, to prove the crafting itself is right */
  const struct craft ok[] = {root, {"a", 2, NULL, 0, 0, 0}, {"a/f", 1, NULL, 5, 5, 0}};
  size_t len;
  uint8_t *buf = craft_index(ok, 3, 1, &len);
  st_layer_index *idx = NULL;
  assert_int_equal(st_layer_index_decode(&idx, buf, len, NULL), 0);
  st_layer_index_free(idx);
  free(buf);

  REJECT(ST_EUNSAFE, "'..'", root, {"..", 2, NULL, 0, 0, 0});
  REJECT(ST_EUNSAFE, "'..'", root, {"a", 2, NULL, 0, 0, 0}, {"a/../../etc", 1, NULL, 0, 0, 0});
  REJECT(ST_EUNSAFE, "absolute", root, {"/etc/passwd", 1, NULL, 0, 0, 0});
  REJECT(ST_EUNSAFE, "empty component", root, {"a", 2, NULL, 0, 0, 0}, {"a//b", 1, NULL, 0, 0, 0});
  REJECT(ST_EUNSAFE, "'.'", root, {"a", 2, NULL, 0, 0, 0}, {"a/.", 1, NULL, 0, 0, 0});
  /* a symlink pointing out, then a file "through" it */
  REJECT(ST_EUNSAFE, "not a directory", root, {"a", 3, "/etc", 0, 0, 0},
         {"a/passwd", 1, NULL, 0, 0, 0});
  REJECT(ST_EUNSAFE, "not a directory", root, {"x/y", 1, NULL, 0, 0, 0});
  REJECT(ST_EFORMAT, "root", {"a", 2, NULL, 0, 0, 0});
  REJECT(ST_EFORMAT, "out of order", root, {"b", 1, NULL, 0, 0, 0}, {"a", 1, NULL, 0, 0, 0});
  REJECT(ST_EFORMAT, "out of order", root, {"a", 1, NULL, 0, 0, 0}, {"a", 1, NULL, 0, 0, 0});
  REJECT(ST_EFORMAT, "chunks hold", root, {"f", 1, NULL, 10, 5, 0});
  REJECT(ST_EFORMAT, "chunk digest", root, {"f", 1, NULL, 5, 5, 31});
  REJECT(ST_EFORMAT, "unknown type", root, {"f", 9, NULL, 0, 0, 0});
  REJECT(ST_EFORMAT, "hardlink target", root, {"f", 4, "g", 0, 0, 0});
  REJECT(ST_EFORMAT, "hardlink target", root, {"a", 2, NULL, 0, 0, 0}, {"b", 4, "a", 0, 0, 0});
  REJECT(ST_EUNSAFE, "hardlink target", root, {"f", 4, "../x", 0, 0, 0});
  REJECT(ST_EFORMAT, "symlink", root, {"l", 3, NULL, 0, 0, 0});
  REJECT(ST_EFORMAT, "only regular files", root, {"d", 2, NULL, 5, 5, 0});
  const struct craft v[] = {root};
  expect_reject(v, 1, 2, ST_EVERSION, "version 2");
}

static void test_damaged_bytes(void **state) {
  st_layer_index *a = sample(0);
  uint8_t *buf = NULL;
  size_t len;
  assert_int_equal(st_layer_index_encode(a, &buf, &len, NULL), 0);
  st_error err = {0};
  /* every truncation is rejected (or, rarely, decodes to a valid prefix
   * index, which must then still validate) and never crashes */
  int rejected = 0;
  for (size_t cut = 0; cut < len; cut++) {
    st_layer_index *idx = NULL;
    int rc = st_layer_index_decode(&idx, buf, cut, &err);
    if (rc < 0) {
      rejected++;
      assert_true(rc == ST_EFORMAT || rc == ST_EUNSAFE || rc == ST_EVERSION);
    }
    st_layer_index_free(idx);
  }
  assert_true(rejected > (int)len * 9 / 10);
  /* random bytes */
  uint8_t junk[4096];
  for (int i = 0; i < 200; i++) {
    tu_random(junk, sizeof junk, (uint64_t)i);
    st_layer_index *idx = NULL;
    assert_true(st_layer_index_decode(&idx, junk, (size_t)(i * 20 + 1), &err) < 0);
  }
  free(buf);
  st_layer_index_free(a);
}

static void test_normalize_overrides_and_parents(void **state) {
  st_chunk_params p = params();
  st_layer_index *idx = st_layer_index_new(&p);
  add(idx, "opt/extra/lib/a.so", ST_ENTRY_REGULAR, NULL, 10);
  add(idx, "etc/motd", ST_ENTRY_REGULAR, NULL, 5);
  add(idx, "opt/extra/lib/a.so", ST_ENTRY_SYMLINK, "b.so", 0); /* a later source wins */
  st_entry tmpl = {.mode = 0711, .uid = 7, .gid = 8, .mtime = 99};
  assert_int_equal(st_layer_index_normalize(idx, &tmpl, NULL, NULL), 0);
  const char *want[] = {"", "etc", "etc/motd", "opt", "opt/extra", "opt/extra/lib",
                        "opt/extra/lib/a.so"};
  assert_int_equal(st_layer_index_count(idx), 7);
  for (size_t i = 0; i < 7; i++)
    assert_string_equal(st_layer_index_entry(idx, i)->path, want[i]);
  const st_entry *opt = st_layer_index_find(idx, "opt/extra");
  assert_int_equal(opt->type, ST_ENTRY_DIR);
  assert_int_equal(opt->mode, 0711);
  assert_int_equal(opt->uid, 7);
  assert_int_equal(opt->mtime, 99);
  assert_int_equal(st_layer_index_find(idx, "opt/extra/lib/a.so")->type, ST_ENTRY_SYMLINK);
  assert_int_equal(st_layer_index_validate(idx, NULL), 0);
  st_layer_index_free(idx);
}

static void test_normalize_copies_lower_parents(void **state) {
  st_chunk_params p = params();
  st_layer_index *lower = st_layer_index_new(&p), *idx = st_layer_index_new(&p);
  add(lower, "", ST_ENTRY_DIR, NULL, 0);
  add(lower, "root", ST_ENTRY_DIR, NULL, 0);
  st_layer_index_entry_mut(lower, 1)->mode = 0700;
  st_layer_index_sort(lower);
  add(idx, "root/.bashrc", ST_ENTRY_REGULAR, NULL, 3);
  add(idx, "srv/x", ST_ENTRY_REGULAR, NULL, 3);
  st_entry tmpl = {.mode = 0755};
  assert_int_equal(st_layer_index_normalize(idx, &tmpl, lower, NULL), 0);
  assert_int_equal(st_layer_index_find(idx, "root")->mode, 0700); /* kept from below */
  assert_int_equal(st_layer_index_find(idx, "root")->uid, 1);
  assert_int_equal(st_layer_index_find(idx, "srv")->mode, 0755);  /* new: the template */
  assert_int_equal(st_layer_index_find(idx, "srv")->uid, 0);
  st_layer_index_free(idx);
  st_layer_index_free(lower);
}

static void test_normalize_hardlink_groups(void **state) {
  /* an archive named z/file first and linked a/link and m/link to it */
  st_chunk_params p = params();
  st_layer_index *idx = st_layer_index_new(&p);
  add(idx, "z", ST_ENTRY_DIR, NULL, 0);
  add(idx, "z/file", ST_ENTRY_REGULAR, NULL, 42);
  add(idx, "m", ST_ENTRY_DIR, NULL, 0);
  add(idx, "m/link", ST_ENTRY_HARDLINK, "z/file", 0);
  add(idx, "a", ST_ENTRY_DIR, NULL, 0);
  add(idx, "a/link", ST_ENTRY_HARDLINK, "m/link", 0); /* a chain, too */
  st_entry tmpl = {.mode = 0755};
  assert_int_equal(st_layer_index_normalize(idx, &tmpl, NULL, NULL), 0);
  const st_entry *first = st_layer_index_find(idx, "a/link");
  assert_int_equal(first->type, ST_ENTRY_REGULAR);
  assert_int_equal(first->size, 42);
  assert_int_equal(first->n_chunks, 1);
  assert_null(first->target);
  const st_entry *m = st_layer_index_find(idx, "m/link");
  const st_entry *z = st_layer_index_find(idx, "z/file");
  assert_int_equal(m->type, ST_ENTRY_HARDLINK);
  assert_string_equal(m->target, "a/link");
  assert_int_equal(z->type, ST_ENTRY_HARDLINK);
  assert_string_equal(z->target, "a/link");
  assert_int_equal(z->n_chunks, 0);
  assert_int_equal(st_layer_index_validate(idx, NULL), 0);
  st_layer_index_free(idx);
}

static void test_path_check(void **state) {
  assert_int_equal(st_path_check("", NULL), 0);
  assert_int_equal(st_path_check("a/b.c/..d/...", NULL), 0);
  char longname[300];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  assert_int_equal(st_path_check(longname, NULL), ST_EUNSAFE);
  assert_int_equal(st_path_check("a/", NULL), ST_EUNSAFE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deterministic_roundtrip),
      cmocka_unit_test(test_rejects_crafted),
      cmocka_unit_test(test_damaged_bytes),
      cmocka_unit_test(test_normalize_overrides_and_parents),
      cmocka_unit_test(test_normalize_hardlink_groups),
      cmocka_unit_test(test_normalize_copies_lower_parents),
      cmocka_unit_test(test_path_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
