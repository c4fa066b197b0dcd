/* SPDX-License-Identifier: Apache-2.0 */
/* Packing a tree and unpacking it: exact round trip, reproducible digests,
 * file-aware chunking, failure injection, corruption, unsafe destinations. */
#include "testutil.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layer-writer.h"
#include "unpack.h"

struct fx {
  char *dir;
  char src[PATH_MAX], store[PATH_MAX], out[PATH_MAX];
};

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp();
  snprintf(f->src, sizeof f->src, "%s/src", f->dir);
  snprintf(f->store, sizeof f->store, "%s/store", f->dir);
  snprintf(f->out, sizeof f->out, "%s/out", f->dir);
  uint8_t *big = malloc(3u << 20);
  tu_random(big, 3u << 20, 11);
  tu_write(f->src, "usr/lib/big.so", big, 3u << 20);
  tu_write(f->src, "usr/lib/copy.so", big, 3u << 20); /* identical content */
  free(big);
  tu_write(f->src, "etc/motd", "hello\n", 6);
  tu_write(f->src, "etc/empty", "", 0);
  assert_int_equal(tu_sh("cd %s && mkdir -p var/empty && ln -s ../etc/motd usr/motd && "
                         "ln etc/motd etc/motd.hard && chmod 4711 usr/lib/big.so && "
                         "chmod 0555 var && chown 1234:5678 etc/motd 2>/dev/null; true",
                         f->src),
                   0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  tu_rmtree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

static st_store *open_store(const char *path) {
  st_store *s = NULL;
  st_error err = {0};
  assert_int_equal(st_store_open(&s, path, ST_STORE_CREATE, &err), 0);
  return s;
}

static int pack(st_store *s, const char *src, st_digest *d, st_pack_stats *stats,
                st_error *err) {
  st_layer_writer *w = NULL;
  assert_int_equal(st_layer_writer_new(&w, s, 2, err), 0);
  st_pack_opts po = {0};
  int rc = st_layer_pack_dir(w, src, &po, err);
  if (rc == ST_OK)
    rc = st_layer_writer_finish(w, d, NULL, err);
  if (stats)
    *stats = *st_layer_writer_stats(w);
  st_layer_writer_free(w);
  return rc;
}

static void test_roundtrip_exact(void **state) {
  struct fx *f = *state;
  st_store *s = open_store(f->store);
  st_error err = {0};
  st_digest d;
  st_pack_stats ps;
  assert_int_equal(pack(s, f->src, &d, &ps, &err), 0);
  assert_int_equal(ps.files, 4);
  assert_int_equal(ps.hardlinks, 1);
  assert_int_equal(ps.symlinks, 1);
  /* the copy deduplicates completely: only one file's chunks are new */
  assert_true(ps.bytes_new <= (3u << 20) + 16);
  st_layer_index *idx = NULL;
  assert_int_equal(st_layer_index_load(&idx, s, &d, &err), 0);
  st_unpack_opts uo = st_unpack_opts_default();
  st_unpack_stats us;
  assert_int_equal(st_layer_unpack(s, idx, f->out, &uo, &us, &err), 0);
  assert_int_equal(us.files, 4);
  /* contents, modes, owners, link counts and symlinks all equal */
#define MANIFEST "cd %s && find . -printf '%%p %%y %%m %%U %%G %%s %%n %%l\\n' | sort > %s/%s.lst"
  assert_int_equal(tu_sh(MANIFEST, f->src, f->dir, "a"), 0);
  assert_int_equal(tu_sh(MANIFEST, f->out, f->dir, "b"), 0);
  assert_int_equal(tu_sh("diff %s/a.lst %s/b.lst", f->dir, f->dir), 0);
  assert_int_equal(tu_sh("diff -r --no-dereference %s %s", f->src, f->out), 0);
  /* mtimes are normalised to 0 */
  struct stat st;
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/etc/motd", f->out);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mtime, 0);
  /* packing again, into another store, gives the same digest */
  char other[PATH_MAX];
  snprintf(other, sizeof other, "%s/store2", f->dir);
  st_store *s2 = open_store(other);
  st_digest d2;
  assert_int_equal(pack(s2, f->src, &d2, &ps, &err), 0);
  assert_true(st_digest_equal(&d, &d2));
  /* re-packing into the same store adds nothing */
  assert_int_equal(pack(s2, f->src, &d2, &ps, &err), 0);
  assert_int_equal(ps.chunks_new, 0);
  st_store_free(s2);
  st_layer_index_free(idx);
  st_store_free(s);
}

static void test_one_line_edit_costs_one_chunk(void **state) {
  struct fx *f = *state;
  st_store *s = open_store(f->store);
  st_error err = {0};
  st_digest d1, d2;
  st_pack_stats ps;
  /* many small files: each starts its own chunk */
  char rel[64];
  for (int i = 0; i < 50; i++) {
    snprintf(rel, sizeof rel, "py/mod%02d.py", i);
    char text[3000];
    tu_random(text, sizeof text, (uint64_t)i + 100);
    tu_write(f->src, rel, text, sizeof text);
  }
  assert_int_equal(pack(s, f->src, &d1, &ps, &err), 0);
  tu_write(f->src, "py/mod07.py", "changed\n", 8);
  assert_int_equal(pack(s, f->src, &d2, &ps, &err), 0);
  assert_false(st_digest_equal(&d1, &d2));
  assert_int_equal(ps.chunks_new, 1);
  assert_int_equal(ps.bytes_new, 8);
  st_store_free(s);
}

static int count_objects(const st_digest *d, uint64_t stored, void *ud) {
  (*(int *)ud)++;
  return 0;
}

static void test_injected_enospc_writes_no_index(void **state) {
  struct fx *f = *state;
  st_backend *b = NULL;
  st_store *s = NULL;
  st_error err = {0};
  assert_int_equal(st_backend_mem_new(&b, &err), 0);
  st_store_config cfg = st_store_config_default();
  assert_int_equal(st_store_init_backend(b, &cfg, &err), 0);
  assert_int_equal(st_store_open_backend(&s, b, &err), 0);
  st_backend_mem_fail_puts_after(b, 10, ST_ENOSPC);
  st_digest d;
  assert_int_equal(pack(s, f->src, &d, NULL, &err), ST_ENOSPC);
  assert_non_null(strstr(err.msg, "injected failure"));
  /* no layer index may exist for a layer whose chunks are not all stored */
  int n = 0;
  assert_int_equal(st_store_list(s, ST_KIND_INDEX, count_objects, &n, &err), 0);
  assert_int_equal(n, 0);
  n = 0;
  assert_int_equal(st_store_list(s, ST_KIND_CHUNK, count_objects, &n, &err), 0);
  assert_int_equal(n, 10);
  /* once space is back, the same pack completes */
  st_backend_mem_fail_puts_after(b, -1, 0);
  assert_int_equal(pack(s, f->src, &d, NULL, &err), 0);
  n = 0;
  assert_int_equal(st_store_list(s, ST_KIND_INDEX, count_objects, &n, &err), 0);
  assert_int_equal(n, 1);
  st_store_free(s);
}

static void test_corrupt_chunk_named_and_dest_absent(void **state) {
  struct fx *f = *state;
  st_store *s = open_store(f->store);
  st_error err = {0};
  st_digest d;
  assert_int_equal(pack(s, f->src, &d, NULL, &err), 0);
  st_layer_index *idx = NULL;
  assert_int_equal(st_layer_index_load(&idx, s, &d, &err), 0);
  const st_entry *motd = st_layer_index_find(idx, "etc/motd");
  char hex[65];
  st_digest_hex(&motd->chunks[0].digest, hex);
  /* replace the chunk file with the frame of other content */
  assert_int_equal(tu_sh("cd %s/chunks/%.2s && chmod u+w %s && printf 'garbage' > %s", f->store,
                         hex, hex, hex),
                   0);
  st_unpack_opts uo = st_unpack_opts_default();
  assert_int_equal(st_layer_unpack(s, idx, f->out, &uo, NULL, &err), ST_ECORRUPT);
  assert_non_null(strstr(err.msg, hex));
  assert_non_null(strstr(err.msg, "etc/motd"));
  struct stat st;
  assert_int_equal(lstat(f->out, &st), -1); /* nothing half-written */
  assert_int_equal(tu_sh("ls -d %s.strata-tmp-* 2>/dev/null | grep -q .", f->out), 1);
  st_layer_index_free(idx);
  st_store_free(s);
}

static void test_refuses_symlink_in_dest(void **state) {
  struct fx *f = *state;
  st_store *s = open_store(f->store);
  st_error err = {0};
  st_digest d;
  assert_int_equal(pack(s, f->src, &d, NULL, &err), 0);
  st_layer_index *idx = NULL;
  assert_int_equal(st_layer_index_load(&idx, s, &d, &err), 0);
  /* DEST exists and its "usr" is a symlink to a directory outside DEST */
  assert_int_equal(tu_sh("mkdir -p %s/outside %s && ln -s %s/outside %s/usr", f->dir, f->out,
                         f->dir, f->out),
                   0);
  st_unpack_opts uo = st_unpack_opts_default();
  assert_int_equal(st_layer_unpack(s, idx, f->out, &uo, NULL, &err), ST_EUNSAFE);
  assert_non_null(strstr(err.msg, "usr"));
  assert_int_equal(tu_sh("test -z \"$(ls -A %s/outside)\"", f->dir), 0);
  st_layer_index_free(idx);
  st_store_free(s);
}

static void test_special_files_skipped(void **state) {
  struct fx *f = *state;
  assert_int_equal(tu_sh("mkfifo %s/fifo", f->src), 0);
  st_store *s = open_store(f->store);
  st_error err = {0};
  st_digest d;
  st_pack_stats ps;
  assert_int_equal(pack(s, f->src, &d, &ps, &err), 0);
  assert_int_equal(ps.skipped, 1);
  st_layer_index *idx = NULL;
  assert_int_equal(st_layer_index_load(&idx, s, &d, &err), 0);
  assert_null(st_layer_index_find(idx, "fifo"));
  st_layer_index_free(idx);
  st_store_free(s);
}

/* An overlayfs upper directory: a 0:0 character device is a whiteout, an
 * opaque directory keeps its flag, the overlay's xattrs are not recorded;
 * without overlay_upper the device is skipped. finish without a digest
 * stores no index. Needs root (mknod, trusted.* xattrs). */
static void test_overlay_upper(void **state) {
  struct fx *f = *state;
  if (geteuid() != 0)
    skip();
  char up[PATH_MAX];
  snprintf(up, sizeof up, "%s/upper", f->dir);
  tu_write(up, "etc/new", "n\n", 2);
  tu_write(up, "opq/inner", "i\n", 2);
  if (tu_sh("cd %s && mknod etc/gone c 0 0 && setfattr -n trusted.overlay.opaque -v y opq && "
            "setfattr -n trusted.overlay.origin -v 0x00 etc/new && "
            "setfattr -n trusted.overlay.impure -v y etc && "
            "setfattr -n user.keep -v v etc/new",
            up) != 0)
    skip(); /* no setfattr, or a file system without xattrs */
  st_store *s = open_store(f->store);
  st_error err = {0};
  st_layer_writer *w = NULL;
  assert_int_equal(st_layer_writer_new(&w, s, 2, &err), 0);
  st_pack_opts po = {.overlay_upper = 1};
  assert_int_equal(st_layer_pack_dir(w, up, &po, &err), 0);
  st_layer_index *idx = NULL;
  assert_int_equal(st_layer_writer_finish(w, NULL, &idx, &err), 0);
  st_layer_writer_free(w);
  const st_entry *e = st_layer_index_find(idx, "etc/gone");
  assert_non_null(e);
  assert_int_equal(e->type, ST_ENTRY_WHITEOUT);
  e = st_layer_index_find(idx, "opq");
  assert_non_null(e);
  assert_true(e->opaque);
  assert_false(st_layer_index_find(idx, "etc")->opaque);
  assert_int_equal(st_layer_index_find(idx, "etc")->n_xattrs, 0);
  e = st_layer_index_find(idx, "etc/new");
  assert_int_equal(e->n_xattrs, 1);
  assert_string_equal(e->xattrs[0].name, "user.keep");
  st_layer_index_free(idx);
  /* the index was not stored; the chunks were */
  assert_int_equal(tu_sh("test -z \"$(find %s/indexes -type f)\"", f->store), 0);
  assert_int_equal(tu_sh("test -n \"$(find %s/chunks -type f)\"", f->store), 0);
  /* an ordinary pack skips the device and records every xattr */
  st_digest d;
  st_pack_stats ps;
  assert_int_equal(pack(s, up, &d, &ps, &err), 0);
  assert_int_equal(ps.skipped, 1);
  assert_int_equal(st_layer_index_load(&idx, s, &d, &err), 0);
  assert_null(st_layer_index_find(idx, "etc/gone"));
  assert_false(st_layer_index_find(idx, "opq")->opaque);
  assert_int_equal(st_layer_index_find(idx, "opq")->n_xattrs, 1);
  st_layer_index_free(idx);
  st_store_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_roundtrip_exact, setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_line_edit_costs_one_chunk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_injected_enospc_writes_no_index, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_chunk_named_and_dest_absent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refuses_symlink_in_dest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_special_files_skipped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_overlay_upper, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
