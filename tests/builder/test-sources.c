/* SPDX-License-Identifier: Apache-2.0 */
/* Layer sources against the real tools: archives in every compression give
 * the tree tar -x gives, zip/wheel, cpio, .deb (dpkg-deb), file and dir
 * sources with dest/owner/mode, input digests, damaged and malicious input,
 * and the stat-only directory digest. */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "source.h"
#include "unpack.h"

struct fx {
  char *dir;
  st_store *s;
};

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp();
  char store[PATH_MAX];
  snprintf(store, sizeof store, "%s/store", f->dir);
  st_error err = {0};
  assert_int_equal(st_store_open(&f->s, store, ST_STORE_CREATE, &err), 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  st_store_free(f->s);
  tu_rmtree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

typedef enum { K_DIR, K_FILE, K_ARCHIVE, K_DEB } kind;

/* Builds a layer from one source. On success the layer is unpacked into
 * dir/out (when out is set) and its index returned in *idx (nullable). */
static int build(struct fx *f, kind k, const char *input, const st_source_opts *o,
                 const char *out, st_layer_index **idx, char **control, st_error *err) {
  st_layer_writer *w = NULL;
  assert_int_equal(st_layer_writer_new(&w, f->s, 2, err), 0);
  int rc = k == K_DIR       ? st_source_dir(w, input, o, err)
           : k == K_FILE    ? st_source_file(w, input, o, err)
           : k == K_ARCHIVE ? st_source_archive(w, input, o, err)
                            : st_source_deb(w, input, o, control, err);
  st_digest d;
  st_layer_index *index = NULL;
  if (rc == ST_OK)
    rc = st_layer_writer_finish(w, &d, &index, err);
  st_layer_writer_free(w);
  if (rc < 0)
    return rc;
  if (out) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", f->dir, out);
    st_unpack_opts uo = st_unpack_opts_default();
    assert_int_equal(st_layer_unpack(f->s, index, path, &uo, NULL, err), 0);
  }
  if (idx)
    *idx = index;
  else
    st_layer_index_free(index);
  return ST_OK;
}

static void build_ok(struct fx *f, kind k, const char *input, const st_source_opts *o,
                     const char *out, st_layer_index **idx, char **control) {
  st_error err = {0};
  int rc = build(f, k, input, o, out, idx, control, &err);
  if (rc != 0)
    fail_msg("%s: %s", input, err.msg);
}

/* Expects the build to fail with code and a message holding both words. */
static void build_fails(struct fx *f, kind k, const char *input, const st_source_opts *o,
                        int code, const char *w1, const char *w2) {
  st_error err = {0};
  char *control = NULL;
  int rc = build(f, k, input, o, NULL, NULL, &control, &err);
  if (rc != code || !strstr(err.msg, w1) || (w2 && !strstr(err.msg, w2)))
    fail_msg("%s: expected %d with '%s' '%s', got %d: %s", input, code, w1, w2 ? w2 : "", rc,
             err.msg);
  assert_null(control);
}

static char *at(struct fx *f, const char *rel) {
  static char buf[16][PATH_MAX];
  static int i;
  char *p = buf[i++ % 16];
  snprintf(p, PATH_MAX, "%s/%s", f->dir, rel);
  return p;
}

/* Compares two trees: types, modes, link counts, symlinks, contents. */
static void same_tree(struct fx *f, const char *a, const char *b) {
#define LIST "cd %s && find . -printf '%%p %%y %%m %%n %%l\\n' | sort > %s"
  assert_int_equal(tu_sh(LIST, at(f, a), at(f, "a.lst")), 0);
  assert_int_equal(tu_sh(LIST, at(f, b), at(f, "b.lst")), 0);
  if (tu_sh("diff %s %s >&2", at(f, "a.lst"), at(f, "b.lst")) != 0)
    fail_msg("trees %s and %s differ", a, b);
  assert_int_equal(tu_sh("diff -r --no-dereference %s %s >&2", at(f, a), at(f, b)), 0);
}

static void sha256_of(struct fx *f, const char *path, st_digest *out) {
  assert_int_equal(tu_sh("sha256sum %s | cut -c1-64 | tr -d '\\n' > %s", path, at(f, "sum")), 0);
  FILE *fp = fopen(at(f, "sum"), "r");
  char hex[65] = "";
  assert_non_null(fgets(hex, sizeof hex, fp));
  fclose(fp);
  assert_int_equal(st_digest_parse(out, hex, NULL), 0);
}

static void assert_hashed(struct fx *f, st_hasher *h, const char *path) {
  st_digest got, want;
  st_hasher_final(h, &got);
  sha256_of(f, path, &want);
  assert_true(st_digest_equal(&got, &want));
}

/* A tree with every kind of entry an archive keeps. */
static void make_tree(struct fx *f, const char *rel) {
  char *root = at(f, rel);
  uint8_t *big = malloc(300000);
  tu_random(big, 300000, 7);
  tu_write(root, "a/b/big.bin", big, 300000);
  free(big);
  tu_write(root, "a/hello.txt", "hello\n", 6);
  tu_write(root, "a/zero", "", 0);
  tu_write(root, "a/run.sh", "#!/bin/sh\n", 10);
  tu_write(root, "a/suid", "s", 1);
  tu_write(root, "a/sgid", "g", 1);
  assert_int_equal(tu_sh("cd %s && mkdir -p a/empty && chmod 0755 a/run.sh && chmod 4755 a/suid "
                         "&& chmod 2750 a/sgid && chmod 0700 a/empty && ln -s b/big.bin a/link "
                         "&& ln -s /etc/passwd a/abs-link && ln a/hello.txt a/b/hello.hard",
                         root),
                   0);
}

static void test_archive_formats_match_tar(void **state) {
  struct fx *f = *state;
  make_tree(f, "src");
  static const char *const how[][2] = {
      {"--format=gnu -cf", "tar"},  {"--format=pax -czf", "tar.gz"}, {"-cJf", "tar.xz"},
      {"-cjf", "tar.bz2"},          {"--zstd -cf", "tar.zst"},
  };
  for (size_t i = 0; i < ST_ARRAY_SIZE(how); i++) {
    char name[32], out[32], ref[32];
    snprintf(name, sizeof name, "x.%s", how[i][1]);
    snprintf(out, sizeof out, "out-%zu", i);
    snprintf(ref, sizeof ref, "ref-%zu", i);
    assert_int_equal(tu_sh("cd %s && tar %s %s .", at(f, "src"), how[i][0], at(f, name)), 0);
    assert_int_equal(tu_sh("mkdir %s && tar -xpf %s -C %s", at(f, ref), at(f, name), at(f, ref)),
                     0);
    st_hasher *h = st_hasher_new();
    st_source_opts o = {.hasher = h};
    st_layer_index *idx = NULL;
    build_ok(f, K_ARCHIVE, at(f, name), &o, out, &idx, NULL);
    same_tree(f, ref, out);
    assert_hashed(f, h, at(f, name));
    st_hasher_free(h);
    const st_entry *e = st_layer_index_find(idx, "a/suid");
    assert_non_null(e);
    assert_int_equal(e->mode, 04755);
    assert_int_equal(e->mtime, 0);
    e = st_layer_index_find(idx, "a/abs-link");
    assert_int_equal(e->type, ST_ENTRY_SYMLINK);
    assert_string_equal(e->target, "/etc/passwd"); /* kept as it is */
    st_layer_index_free(idx);
  }
  /* bytes after the end of the archive, never read by libarchive, are hashed */
  assert_int_equal(tu_sh("head -c 2000000 /dev/zero >> %s", at(f, "x.tar")), 0);
  st_hasher *h = st_hasher_new();
  st_source_opts o = {.hasher = h};
  build_ok(f, K_ARCHIVE, at(f, "x.tar"), &o, NULL, NULL, NULL);
  assert_hashed(f, h, at(f, "x.tar"));
  st_hasher_free(h);
}

static int count_diff(const st_entry *a, const st_entry *b, unsigned changes, void *ud) {
  (*(int *)ud)++;
  return 0;
}

static void test_archive_strip_and_dest(void **state) {
  struct fx *f = *state;
  char *src = at(f, "src");
  tu_write(src, "pkg-1.0/bin/tool", "#!/bin/sh\necho tool\n", 20);
  tu_write(src, "pkg-1.0/lib/libx.so", "ELF...", 6);
  tu_write(src, "pkg-1.0/share/doc/README", "docs\n", 5);
  tu_write(src, "README", "top\n", 4);
  assert_int_equal(tu_sh("cd %s && chmod 0755 pkg-1.0/bin/tool && ln pkg-1.0/lib/libx.so "
                         "pkg-1.0/lib/libx.so.1 && tar -czf ../p.tgz pkg-1.0 README && "
                         "tar -czf ../p2.tgz ./pkg-1.0 ./README",
                         src),
                   0);
  assert_int_equal(tu_sh("mkdir -p %s/opt/pkg && tar -xzpf %s -C %s/opt/pkg --strip-components=1",
                         at(f, "ref"), at(f, "p.tgz"), at(f, "ref")),
                   0);
  st_source_opts o = {.dest = "/opt/pkg/", .strip = 1, .mtime = 1700000000};
  st_layer_index *idx = NULL;
  build_ok(f, K_ARCHIVE, at(f, "p.tgz"), &o, "out", &idx, NULL);
  same_tree(f, "ref/opt/pkg", "out/opt/pkg");
  assert_int_equal(tu_sh("test ! -e %s/README && test ! -e %s/opt/pkg/README", at(f, "out"),
                         at(f, "out")),
                   0);
  const st_entry *e = st_layer_index_find(idx, "opt/pkg/lib/libx.so.1");
  assert_non_null(e);
  assert_int_equal(e->type, ST_ENTRY_HARDLINK);
  assert_string_equal(e->target, "opt/pkg/lib/libx.so");
  assert_int_equal(st_layer_index_find(idx, "opt/pkg/bin/tool")->mtime, 1700000000);
  /* a leading "./" is not a component: same layer either way */
  st_layer_index *idx2 = NULL;
  build_ok(f, K_ARCHIVE, at(f, "p2.tgz"), &o, NULL, &idx2, NULL);
  int n = 0;
  assert_int_equal(st_layer_index_diff(idx, idx2, count_diff, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(st_layer_index_count(idx2), 11);
  st_layer_index_free(idx2);
  st_layer_index_free(idx);
  o.dest = "/opt/../etc";
  build_fails(f, K_ARCHIVE, at(f, "p.tgz"), &o, ST_EUNSAFE, "destination", "..");
}

static void test_archive_owner_xattrs_special(void **state) {
  struct fx *f = *state;
  make_tree(f, "src");
  assert_int_equal(tu_sh("mkfifo %s/a/fifo && cd %s && tar --owner=1234 --group=5678 "
                         "--numeric-owner -czf ../o.tgz .",
                         at(f, "src"), at(f, "src")),
                   0);
  st_source_opts o = {.owner = ST_OWNER_FIXED, .uid = 1, .gid = 2}; /* ignored for archives */
  st_layer_writer *w = NULL;
  st_error err = {0};
  assert_int_equal(st_layer_writer_new(&w, f->s, 0, &err), 0);
  assert_int_equal(st_source_archive(w, at(f, "o.tgz"), &o, &err), 0);
  assert_int_equal(st_layer_writer_stats(w)->skipped, 1); /* the FIFO */
  st_layer_index *idx = NULL;
  st_digest d;
  assert_int_equal(st_layer_writer_finish(w, &d, &idx, &err), 0);
  st_layer_writer_free(w);
  assert_null(st_layer_index_find(idx, "a/fifo"));
  for (size_t i = 0; i < st_layer_index_count(idx); i++) {
    assert_int_equal(st_layer_index_entry(idx, i)->uid, 1234);
    assert_int_equal(st_layer_index_entry(idx, i)->gid, 5678);
  }
  st_layer_index_free(idx);
  /* pax xattrs are kept */
  assert_int_equal(tu_sh("cd %s && python3 - <<'EOF'\n"
                         "import tarfile, io\n"
                         "with tarfile.open('x.tar', 'w', format=tarfile.PAX_FORMAT) as t:\n"
                         "    ti = tarfile.TarInfo('bin/ping'); ti.size = 4; ti.mode = 0o4711\n"
                         "    ti.pax_headers = {'SCHILY.xattr.user.comment': 'hi',\n"
                         "                      'SCHILY.xattr.user.a': 'first'}\n"
                         "    t.addfile(ti, io.BytesIO(b'ping'))\n"
                         "EOF",
                         f->dir),
                   0);
  build_ok(f, K_ARCHIVE, at(f, "x.tar"), &o, NULL, &idx, NULL);
  const st_entry *e = st_layer_index_find(idx, "bin/ping");
  assert_non_null(e);
  assert_int_equal(e->mode, 04711);
  assert_int_equal(e->n_xattrs, 2);
  assert_string_equal(e->xattrs[0].name, "user.a");
  assert_string_equal(e->xattrs[1].name, "user.comment");
  assert_int_equal(e->xattrs[1].len, 2);
  assert_memory_equal(e->xattrs[1].value, "hi", 2);
  st_layer_index_free(idx);
}

static void test_zip_wheel(void **state) {
  struct fx *f = *state;
  char *src = at(f, "src");
  uint8_t *big = malloc(400000);
  tu_random(big, 400000, 3);
  tu_write(src, "pkg/data.bin", big, 400000);
  free(big);
  tu_write(src, "pkg/__init__.py", "x = 1\n", 6);
  tu_write(src, "pkg/bin/tool", "#!/bin/sh\necho hi\n", 18);
  tu_write(src, "pkg-1.0.dist-info/RECORD", "pkg/__init__.py,,\n", 18);
  assert_int_equal(tu_sh("cd %s && chmod 0755 pkg/bin/tool && python3 - <<'EOF'\n"
                         "import zipfile\n"
                         "with zipfile.ZipFile('../pkg-1.0-py3-none-any.whl', 'w') as z:\n"
                         "    for name, mode, how in [('pkg/__init__.py', 0o644, 8),\n"
                         "            ('pkg/bin/tool', 0o755, 8), ('pkg/data.bin', 0o644, 0),\n"
                         "            ('pkg-1.0.dist-info/RECORD', 0o644, 8)]:\n"
                         "        zi = zipfile.ZipInfo(name, (2024, 1, 2, 3, 4, 5))\n"
                         "        zi.external_attr = (0o100000 | mode) << 16\n"
                         "        zi.compress_type = how\n"
                         "        z.writestr(zi, open(name, 'rb').read())\n"
                         "EOF",
                         src),
                   0);
  st_hasher *h = st_hasher_new();
  st_source_opts o = {.dest = "/site", .hasher = h};
  st_layer_index *idx = NULL;
  build_ok(f, K_ARCHIVE, at(f, "pkg-1.0-py3-none-any.whl"), &o, "out", &idx, NULL);
  assert_int_equal(tu_sh("diff -r %s %s/site >&2", src, at(f, "out")), 0);
  assert_int_equal(st_layer_index_find(idx, "site/pkg/bin/tool")->mode, 0755);
  assert_int_equal(st_layer_index_find(idx, "site/pkg/__init__.py")->mode, 0644);
  assert_int_equal(st_layer_index_find(idx, "site/pkg/data.bin")->size, 400000);
  /* the zip is read through its central directory (seeks): still hashed in order */
  assert_hashed(f, h, at(f, "pkg-1.0-py3-none-any.whl"));
  st_layer_index_free(idx);
  /* a self-extracting zip: the prefix libarchive seeks over is hashed too */
  assert_int_equal(tu_sh("cd %s && head -c 1000000 /dev/zero | tr '\\0' x > sfx.zip && "
                         "cat pkg-1.0-py3-none-any.whl >> sfx.zip",
                         f->dir),
                   0);
  build_ok(f, K_ARCHIVE, at(f, "sfx.zip"), &o, "out-sfx", NULL, NULL);
  assert_int_equal(tu_sh("diff -r %s %s/site >&2", src, at(f, "out-sfx")), 0);
  assert_hashed(f, h, at(f, "sfx.zip"));
  st_hasher_free(h);
}

/* A cpio (newc) archive keeps the data of a hardlinked file with its last
 * link: the layer must still give both names the content. */
static void test_cpio_hardlink_data(void **state) {
  struct fx *f = *state;
  assert_int_equal(tu_sh("cd %s && python3 - <<'EOF'\n"
                         "def ent(name, mode, data, ino, nlink):\n"
                         "    n = name.encode() + b'\\0'\n"
                         "    h = '070701' + ''.join('%%08x' %% v for v in (ino, mode, 0, 0,\n"
                         "        nlink, 0, len(data), 0, 0, 0, 0, len(n), 0))\n"
                         "    b = h.encode() + n\n"
                         "    b += b'\\0' * (-len(b) %% 4)\n"
                         "    return b + data + b'\\0' * (-len(data) %% 4)\n"
                         "out = ent('d', 0o40755, b'', 1, 2) + ent('d/a', 0o100644, b'', 2, 2)\n"
                         "out += ent('d/b', 0o100644, b'shared\\n', 2, 2)\n"
                         "out += ent('TRAILER!!!', 0, b'', 0, 1)\n"
                         "open('x.cpio', 'wb').write(out + b'\\0' * (-len(out) %% 512))\n"
                         "EOF",
                         f->dir),
                   0);
  st_source_opts o = {0};
  st_layer_index *idx = NULL;
  build_ok(f, K_ARCHIVE, at(f, "x.cpio"), &o, "out", &idx, NULL);
  assert_int_equal(tu_sh("cd %s/d && test \"$(cat a)\" = shared && test \"$(cat b)\" = shared "
                         "&& test $(stat -c %%h a) = 2",
                         at(f, "out")),
                   0);
  st_layer_index_free(idx);
}

static void write_control(struct fx *f, const char *pkg) {
  char *root = at(f, pkg);
  static const char control[] = "Package: strata-hello\nVersion: 1.2-3\nArchitecture: all\n"
                                "Maintainer: Test <test@example.com>\nDescription: test\n";
  tu_write(root, "DEBIAN/control", control, sizeof control - 1);
  tu_write(root, "usr/bin/hello", "#!/bin/sh\necho hello\n", 21);
  tu_write(root, "usr/share/doc/strata-hello/copyright", "public domain\n", 14);
  assert_int_equal(tu_sh("cd %s && chmod 0755 usr/bin/hello && ln -s hello usr/bin/hi && "
                         "chmod -R go-w .",
                         root),
                   0);
}

static void test_deb(void **state) {
  struct fx *f = *state;
  write_control(f, "pkg");
  static const char *const comp[] = {"xz", "gzip", "zstd", "none"};
  for (size_t i = 0; i < ST_ARRAY_SIZE(comp); i++) {
    char deb[32], out[32], ref[32];
    snprintf(deb, sizeof deb, "p-%s.deb", comp[i]);
    snprintf(out, sizeof out, "out-%zu", i);
    snprintf(ref, sizeof ref, "ref-%zu", i);
    assert_int_equal(tu_sh("dpkg-deb --build --root-owner-group -Z%s %s %s >/dev/null", comp[i],
                           at(f, "pkg"), at(f, deb)),
                     0);
    assert_int_equal(tu_sh("dpkg-deb -x %s %s", at(f, deb), at(f, ref)), 0);
    st_hasher *h = st_hasher_new();
    st_source_opts o = {.hasher = h, .mtime = 5};
    st_layer_index *idx = NULL;
    char *control = NULL;
    build_ok(f, K_DEB, at(f, deb), &o, out, &idx, &control);
    same_tree(f, ref, out);
    assert_hashed(f, h, at(f, deb));
    st_hasher_free(h);
    assert_non_null(control);
    assert_non_null(strstr(control, "Package: strata-hello\n"));
    assert_non_null(strstr(control, "Version: 1.2-3\n"));
    size_t len = strlen(control);
    assert_true(len > 2 && control[len - 1] == '\n' && control[len - 2] != '\n');
    free(control);
    assert_null(st_layer_index_find(idx, "DEBIAN"));
    const st_entry *e = st_layer_index_find(idx, "usr/bin/hello");
    assert_int_equal(e->mode, 0755);
    assert_int_equal(e->uid, 0);
    assert_int_equal(e->mtime, 5);
    st_layer_index_free(idx);
  }
}

/* Writes an ar archive with the given members via python. */
static void write_ar(struct fx *f, const char *name, const char *members_py) {
  assert_int_equal(tu_sh("cd %s && python3 - <<'EOF'\n"
                         "m = %s\n"
                         "with open('%s', 'wb') as out:\n"
                         "    out.write(b'!<arch>\\n')\n"
                         "    for n, d in m:\n"
                         "        out.write(('%%-16s%%-12s%%-6s%%-6s%%-8s%%-10s`\\n' %% (n, 0, 0, "
                         "0, 100644, len(d))).encode() + d + b'\\n' * (len(d) %% 2))\n"
                         "EOF",
                         f->dir, members_py, name),
                   0);
}

static void test_deb_damaged(void **state) {
  struct fx *f = *state;
  write_control(f, "pkg");
  /* cut in the middle of data.tar.gz */
  assert_int_equal(tu_sh("dpkg-deb --build --root-owner-group -Zgzip %s %s >/dev/null && "
                         "cd %s && ar x p.deb control.tar.gz && "
                         "head -c $(($(stat -c %%s p.deb) - 40)) p.deb > trunc.deb",
                         at(f, "pkg"), at(f, "p.deb"), f->dir),
                   0);
  st_source_opts o = {0};
  build_fails(f, K_DEB, at(f, "trunc.deb"), &o, ST_EFORMAT, at(f, "trunc.deb"), NULL);
  write_ar(f, "nodata.deb",
           "[('debian-binary', b'2.0\\n'),"
           " ('control.tar.gz', open('control.tar.gz', 'rb').read())]");
  build_fails(f, K_DEB, at(f, "nodata.deb"), &o, ST_EFORMAT, at(f, "nodata.deb"), "data.tar");
  write_ar(f, "v3.deb", "[('debian-binary', b'3.0\\n')]");
  build_fails(f, K_DEB, at(f, "v3.deb"), &o, ST_EFORMAT, "debian-binary", "3.0");
  write_ar(f, "order.deb", "[('control.tar.gz', b''), ('debian-binary', b'2.0\\n')]");
  build_fails(f, K_DEB, at(f, "order.deb"), &o, ST_EFORMAT, "debian-binary", "first");
  /* a data.tar that escapes is refused like any archive */
  assert_int_equal(tu_sh("cd %s && python3 -c \"import tarfile, io\n"
                         "t = tarfile.open('evil.tar', 'w'); ti = tarfile.TarInfo('./../../x')\n"
                         "ti.size = 1; t.addfile(ti, io.BytesIO(b'x')); t.close()\"",
                         f->dir),
                   0);
  write_ar(f, "evil.deb",
           "[('debian-binary', b'2.0\\n'), ('control.tar.gz', open('control.tar.gz','rb').read()),"
           " ('data.tar', open('evil.tar','rb').read())]");
  build_fails(f, K_DEB, at(f, "evil.deb"), &o, ST_EUNSAFE, "data.tar: entry './../../x'", NULL);
}

static void test_file_source(void **state) {
  struct fx *f = *state;
  uint8_t *data = malloc(100000);
  tu_random(data, 100000, 9);
  tu_write(f->dir, "in/conf.bin", data, 100000);
  free(data);
  char in[PATH_MAX];
  snprintf(in, sizeof in, "%s/in/conf.bin", f->dir);
  assert_int_equal(chmod(in, 0751), 0);
  st_hasher *h = st_hasher_new();
  st_source_opts o = {.dest = "/etc/app/conf.bin", .has_mode = 1, .mode = 0640,
                      .owner = ST_OWNER_FIXED, .uid = 1000, .gid = 1001, .mtime = 1700000000,
                      .hasher = h};
  st_layer_index *idx = NULL;
  build_ok(f, K_FILE, in, &o, "out", &idx, NULL);
  assert_int_equal(tu_sh("cmp %s %s/etc/app/conf.bin", in, at(f, "out")), 0);
  const st_entry *e = st_layer_index_find(idx, "etc/app/conf.bin");
  assert_int_equal(e->type, ST_ENTRY_REGULAR);
  assert_int_equal(e->mode, 0640);
  assert_int_equal(e->uid, 1000);
  assert_int_equal(e->gid, 1001);
  assert_int_equal(e->mtime, 1700000000);
  assert_int_equal(e->size, 100000);
  assert_hashed(f, h, in);
  st_hasher_free(h);
  st_layer_index_free(idx);
  /* the source's mode, root or the source's owner */
  st_source_opts o2 = {.dest = "/x"};
  build_ok(f, K_FILE, in, &o2, NULL, &idx, NULL);
  e = st_layer_index_find(idx, "x");
  assert_int_equal(e->mode, 0751);
  assert_int_equal(e->uid, 0);
  st_layer_index_free(idx);
  o2.owner = ST_OWNER_SOURCE;
  build_ok(f, K_FILE, in, &o2, NULL, &idx, NULL);
  assert_int_equal(st_layer_index_find(idx, "x")->uid, getuid());
  st_layer_index_free(idx);
  o2.dest = "/";
  build_fails(f, K_FILE, in, &o2, ST_EINVAL, "destination", NULL);
  o2.dest = "/x";
  build_fails(f, K_FILE, at(f, "in"), &o2, ST_EINVAL, "not a regular file", NULL);
  build_fails(f, K_FILE, at(f, "missing"), &o2, ST_ENOENT, "missing", NULL);
}

static void test_dir_source(void **state) {
  struct fx *f = *state;
  make_tree(f, "src");
  assert_int_equal(chmod(at(f, "src"), 0750), 0);
  st_source_opts o = {.dest = "/opt/tree", .mtime = 1234};
  st_layer_index *idx = NULL;
  build_ok(f, K_DIR, at(f, "src"), &o, "out", &idx, NULL);
  same_tree(f, "src", "out/opt/tree");
  const st_entry *e = st_layer_index_find(idx, "opt/tree");
  assert_int_equal(e->type, ST_ENTRY_DIR);
  assert_int_equal(e->mode, 0750); /* the source root's mode */
  assert_int_equal(st_layer_index_find(idx, "opt")->mode, 0755);
  e = st_layer_index_find(idx, "opt/tree/a/hello.txt");
  const st_entry *l = st_layer_index_find(idx, "opt/tree/a/b/hello.hard");
  assert_true((e->type == ST_ENTRY_HARDLINK && !strcmp(e->target, l->path)) ||
              (l->type == ST_ENTRY_HARDLINK && !strcmp(l->target, e->path)));
  for (size_t i = 0; i < st_layer_index_count(idx); i++) {
    e = st_layer_index_entry(idx, i);
    if (strncmp(e->path, "opt/tree", 8) == 0) {
      assert_int_equal(e->uid, 0);
      assert_int_equal(e->mtime, 1234);
    }
  }
  st_layer_index_free(idx);
  /* the source's owners, or fixed ones */
  if (getuid() == 0)
    assert_int_equal(tu_sh("chown 1234:5678 %s/a/hello.txt", at(f, "src")), 0);
  struct stat st;
  assert_int_equal(stat(at(f, "src/a/run.sh"), &st), 0);
  o.owner = ST_OWNER_SOURCE;
  build_ok(f, K_DIR, at(f, "src"), &o, NULL, &idx, NULL);
  assert_int_equal(st_layer_index_find(idx, "opt/tree/a/run.sh")->uid, st.st_uid);
  if (getuid() == 0)
    assert_int_equal(st_layer_index_find(idx, "opt/tree/a/hello.txt")->gid, 5678);
  st_layer_index_free(idx);
  o.owner = ST_OWNER_FIXED;
  o.uid = 42;
  o.gid = 43;
  build_ok(f, K_DIR, at(f, "src"), &o, NULL, &idx, NULL);
  e = st_layer_index_find(idx, "opt/tree/a/b/big.bin");
  assert_true(e->uid == 42 && e->gid == 43);
  st_layer_index_free(idx);
  o.dest = "/opt/./x";
  build_fails(f, K_DIR, at(f, "src"), &o, ST_EUNSAFE, "src: destination '/opt/./x'", NULL);
}

static void test_damaged_archives(void **state) {
  struct fx *f = *state;
  uint8_t *data = malloc(1u << 20);
  tu_random(data, 1u << 20, 5);
  tu_write(f->dir, "src/blob", data, 1u << 20);
  free(data);
  assert_int_equal(tu_sh("cd %s && tar -czf ../x.tgz blob && tar -cf ../x.tar blob && cd .. && "
                         "head -c 500000 x.tgz > trunc.tgz && head -c 700000 x.tar > trunc.tar && "
                         "head -c 4096 src/blob > garbage.tar",
                         at(f, "src")),
                   0);
  st_source_opts o = {0};
  build_fails(f, K_ARCHIVE, at(f, "trunc.tgz"), &o, ST_EFORMAT, at(f, "trunc.tgz"), "blob");
  build_fails(f, K_ARCHIVE, at(f, "trunc.tar"), &o, ST_EFORMAT, at(f, "trunc.tar"), NULL);
  build_fails(f, K_ARCHIVE, at(f, "garbage.tar"), &o, ST_EFORMAT, at(f, "garbage.tar"), NULL);
  build_fails(f, K_ARCHIVE, at(f, "absent.tar"), &o, ST_ENOENT, "absent.tar", NULL);
}

static int count(const st_digest *d, uint64_t stored, void *ud) {
  (*(int *)ud)++;
  return 0;
}

static void test_malicious_archives(void **state) {
  struct fx *f = *state;
  assert_int_equal(tu_sh("cd %s && python3 - <<'EOF'\n"
                         "import tarfile, io, zipfile\n"
                         "def tar(name, *members):\n"
                         "    with tarfile.open(name, 'w', format=tarfile.GNU_FORMAT) as t:\n"
                         "        for n, kind, arg in members:\n"
                         "            ti = tarfile.TarInfo(n)\n"
                         "            ti.type = kind\n"
                         "            data = b''\n"
                         "            if kind == tarfile.REGTYPE:\n"
                         "                data = arg\n"
                         "            else:\n"
                         "                ti.linkname = arg\n"
                         "            ti.size = len(data)\n"
                         "            t.addfile(ti, io.BytesIO(data))\n"
                         "R, L, S = tarfile.REGTYPE, tarfile.LNKTYPE, tarfile.SYMTYPE\n"
                         "tar('dotdot.tar', ('ok.txt', R, b'ok'), ('../etc/passwd', R, b'x'))\n"
                         "tar('abs.tar', ('/etc/x', R, b'x'))\n"
                         "tar('hard.tar', ('a.txt', R, b'a'), ('ok', L, '../../x'))\n"
                         "tar('sym.tar', ('evil', S, '/etc'), ('evil/passwd', R, b'x'))\n"
                         "tar('deep.tar', ('a/b/../../../x', R, b'x'))\n"
                         "with zipfile.ZipFile('slip.zip', 'w') as z:\n"
                         "    z.writestr('../slip', 'x')\n"
                         "EOF",
                         f->dir),
                   0);
  st_source_opts o = {.dest = "/opt"};
  build_fails(f, K_ARCHIVE, at(f, "dotdot.tar"), &o, ST_EUNSAFE,
              "dotdot.tar: entry '../etc/passwd'", NULL);
  build_fails(f, K_ARCHIVE, at(f, "abs.tar"), &o, ST_EUNSAFE, "abs.tar: entry '/etc/x'", NULL);
  build_fails(f, K_ARCHIVE, at(f, "hard.tar"), &o, ST_EUNSAFE, "hard.tar: entry 'ok'",
              "'../../x'");
  build_fails(f, K_ARCHIVE, at(f, "deep.tar"), &o, ST_EUNSAFE, "entry 'a/b/../../../x'", NULL);
  build_fails(f, K_ARCHIVE, at(f, "slip.zip"), &o, ST_EUNSAFE, "slip.zip: entry '../slip'", NULL);
  /* the file is never written through the symlink: the layer is refused */
  build_fails(f, K_ARCHIVE, at(f, "sym.tar"), &o, ST_EUNSAFE, "evil/passwd", NULL);
  int n = 0;
  st_error err = {0};
  assert_int_equal(st_store_list(f->s, ST_KIND_INDEX, count, &n, &err), 0);
  assert_int_equal(n, 0); /* no layer came out of any of them */
}

static void dir_digest(struct fx *f, st_digest *out) {
  st_error err = {0};
  assert_int_equal(st_source_dir_digest(at(f, "src"), out, &err), 0);
}

static void test_dir_digest(void **state) {
  struct fx *f = *state;
  make_tree(f, "src");
  assert_int_equal(tu_sh("cd %s && find . -exec touch -h -d @1600000000 {} +", at(f, "src")), 0);
  st_digest d0, d;
  dir_digest(f, &d0);
  dir_digest(f, &d);
  assert_true(st_digest_equal(&d0, &d));
  /* same size, same mtime: a stat-only digest does not see the content */
  assert_int_equal(tu_sh("cd %s && printf 'HELLO\\n' > a/hello.txt && "
                         "touch -d @1600000000 a/hello.txt",
                         at(f, "src")),
                   0);
  dir_digest(f, &d);
  assert_true(st_digest_equal(&d0, &d));
  static const char *const change[][2] = {
      {"chmod 0600 a/hello.txt", "chmod 0644 a/hello.txt"},
      {"touch -d @1600000001 a/zero", "touch -d @1600000000 a/zero"},
      {"touch -d '@1600000000.5' a/zero", "touch -d @1600000000 a/zero"},
      {"printf x >> a/zero && touch -d @1600000000 a/zero",
       "truncate -s 0 a/zero && touch -d @1600000000 a/zero"},
      {"ln -sfn b/other a/link && touch -h -d @1600000000 a/link",
       "ln -sfn b/big.bin a/link && touch -h -d @1600000000 a/link a"},
      {"mkdir a/new && touch -d @1600000000 a/new a", "rmdir a/new && touch -d @1600000000 a"},
  };
  for (size_t i = 0; i < ST_ARRAY_SIZE(change); i++) {
    assert_int_equal(tu_sh("cd %s && %s", at(f, "src"), change[i][0]), 0);
    dir_digest(f, &d);
    if (st_digest_equal(&d0, &d))
      fail_msg("digest unchanged after: %s", change[i][0]);
    assert_int_equal(tu_sh("cd %s && %s", at(f, "src"), change[i][1]), 0);
    dir_digest(f, &d);
    if (!st_digest_equal(&d0, &d))
      fail_msg("digest not restored after: %s", change[i][1]);
  }
  st_error err = {0};
  assert_int_equal(st_source_dir_digest(at(f, "absent"), &d, &err), ST_ENOENT);
  assert_non_null(strstr(err.msg, "absent"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_archive_formats_match_tar, setup, teardown),
      cmocka_unit_test_setup_teardown(test_archive_strip_and_dest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_archive_owner_xattrs_special, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zip_wheel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cpio_hardlink_data, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deb, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deb_damaged, setup, teardown),
      cmocka_unit_test_setup_teardown(test_file_source, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dir_source, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_archives, setup, teardown),
      cmocka_unit_test_setup_teardown(test_malicious_archives, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dir_digest, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
