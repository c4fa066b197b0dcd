/* SPDX-License-Identifier: Apache-2.0 */
/* Recipe loader: the reference example end to end (cells, tags, resolved inputs, config),
 * extends merging and chains, every validation error with its FILE:LINE:COL, --cell
 * filters, and the canonical layer text. */
#include "testutil.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "recipe.h"

struct fx {
  char *dir;  /* temp dir as created */
  char *real; /* its realpath */
};

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp();
  f->real = realpath(f->dir, NULL);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  tu_rmtree(f->dir);
  free(f->dir);
  free(f->real);
  free(f);
  return 0;
}

static void put(const char *dir, const char *rel, const char *text) {
  tu_write(dir, rel, text, strlen(text));
}

static char *path_of(const char *dir, const char *rel) {
  char *p = NULL;
  assert_true(asprintf(&p, "%s/%s", dir, rel) > 0);
  return p;
}

static st_recipe *load_ok(const char *dir, const char *rel) {
  char *path = path_of(dir, rel);
  st_recipe *r = NULL;
  st_error err = {0};
  int rc = st_recipe_load(&r, path, &err);
  if (rc != 0)
    fail_msg("%s: %s", path, err.msg);
  free(path);
  return r;
}

/* Loads dir/rel and expects code and a message "dir/rel:WHERE: ...WORD...". */
static void load_fails_at(const char *dir, const char *rel, const char *file, int code,
                          const char *where, const char *word) {
  char *path = path_of(dir, rel), *prefix = NULL;
  assert_true(asprintf(&prefix, "%s/%s:%s: ", dir, file, where) > 0);
  st_recipe *r = NULL;
  st_error err = {0};
  int rc = st_recipe_load(&r, path, &err);
  if (rc != code || strncmp(err.msg, prefix, strlen(prefix)) || !strstr(err.msg, word))
    fail_msg("%s: want %d '%s...%s', got %d '%s'", rel, code, prefix, word, rc, err.msg);
  assert_null(r);
  free(prefix);
  free(path);
}

static st_recipe_instance *inst_ok(const st_recipe *r, const st_cell *c) {
  st_recipe_instance *ri = NULL;
  st_error err = {0};
  if (st_recipe_instantiate(r, c, &ri, &err) != 0)
    fail_msg("instantiate: %s", err.msg);
  return ri;
}

static void assert_path(const char *got, const char *dir, const char *rel) {
  char *want = path_of(dir, rel);
  assert_string_equal(got, want);
  free(want);
}

static const char example[] =
    "image: pytorch                     # image name\n"
    "tag: \"${torch}-cu${cuda}\"          # tag; ${var} comes from the matrix\n"
    "matrix:\n"
    "  cuda: [\"12.1\", \"12.4\"]\n"
    "  torch: [\"2.5\", \"2.7\"]\n"
    "  exclude:\n"
    "    - {cuda: \"12.1\", torch: \"2.7\"}\n"
    "layers:                            # bottom first\n"
    "  - name: base\n"
    "    sources:\n"
    "      - dir: ./rootfs\n"
    "      - archive: ./extra-${cuda}.tar.gz\n"
    "        dest: /opt/extra\n"
    "        strip: 1\n"
    "  - name: framework\n"
    "    sources:\n"
    "      - deb: ./debs/torch-${torch}/*.deb\n"
    "      - file: ./hello.sh\n"
    "        dest: /usr/local/bin/hello\n"
    "        mode: \"0755\"\n"
    "    delete: [/etc/motd]\n"
    "    run: [\"ldconfig\", \"python3 -m compileall -q /usr/lib/python3\"]\n"
    "config:\n"
    "  env: {PATH: \"/usr/local/bin:/usr/bin:/bin\", CUDA_HOME: /usr/local/cuda}\n"
    "  workdir: /workspace\n"
    "  entrypoint: [\"/bin/bash\"]\n"
    "  labels: {cuda: \"${cuda}\", framework: \"torch-${torch}\"}\n";

static void example_tree(const char *dir) {
  put(dir, "recipe.yaml", example);
  put(dir, "rootfs/etc/hostname", "box\n");
  put(dir, "extra-12.4.tar.gz", "not really a tarball");
  put(dir, "debs/torch-2.7/b.deb", "b");
  put(dir, "debs/torch-2.7/a.deb", "a");
  put(dir, "debs/torch-2.7/notes.txt", "not a deb");
  put(dir, "hello.sh", "#!/bin/sh\necho hello\n");
}

static void test_example_cells(void **state) {
  struct fx *f = *state;
  example_tree(f->dir);
  st_recipe *r = load_ok(f->dir, "recipe.yaml");
  assert_string_equal(st_recipe_image(r), "pytorch");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  assert_int_equal(n, 3); /* 4 combinations minus one exclusion, first axis outermost */
  const char *want[] = {"cuda=12.1,torch=2.5", "cuda=12.4,torch=2.5", "cuda=12.4,torch=2.7"};
  for (size_t i = 0; i < n; i++) {
    char *name = st_cell_name(&cells[i]);
    assert_string_equal(name, want[i]);
    free(name);
  }
  assert_int_equal(cells[2].n, 2);
  assert_string_equal(cells[2].names[0], "cuda");
  assert_string_equal(cells[2].values[1], "2.7");
  /* cell 0 needs extra-12.1.tar.gz, which is missing: named with the archive's position */
  st_recipe_instance *ri = NULL;
  st_error err = {0};
  assert_int_equal(st_recipe_instantiate(r, &cells[0], &ri, &err), ST_ENOENT);
  assert_null(ri);
  char *prefix = NULL;
  assert_true(asprintf(&prefix, "%s/recipe.yaml:12:9: archive: ", f->dir) > 0);
  assert_memory_equal(err.msg, prefix, strlen(prefix));
  assert_non_null(strstr(err.msg, "extra-12.1.tar.gz"));
  free(prefix);
  st_cells_free(cells, n);
  st_recipe_free(r);
}

static void check_example_layers(const st_recipe_instance *ri, const char *real) {
  assert_int_equal(ri->n_layers, 2);
  const st_recipe_layer *base = &ri->layers[0], *fw = &ri->layers[1];
  assert_string_equal(base->name, "base");
  assert_int_equal(base->n_sources, 2);
  assert_int_equal(base->sources[0].kind, ST_SOURCE_DIR);
  assert_path(base->sources[0].paths[0], real, "rootfs");
  assert_string_equal(base->sources[0].rel_paths[0], "rootfs");
  assert_string_equal(base->sources[0].dest, "/");
  assert_false(base->sources[0].owner_source);
  assert_int_equal(base->sources[0].uid, 0);
  assert_int_equal(base->sources[1].kind, ST_SOURCE_ARCHIVE);
  assert_path(base->sources[1].paths[0], real, "extra-12.4.tar.gz");
  assert_string_equal(base->sources[1].dest, "/opt/extra");
  assert_int_equal(base->sources[1].strip, 1);
  assert_int_equal(base->sources[1].loc.line, 12);
  assert_string_equal(fw->name, "framework");
  assert_int_equal(fw->sources[0].kind, ST_SOURCE_DEB);
  assert_int_equal(fw->sources[0].n_paths, 2); /* the glob, sorted; notes.txt not matched */
  assert_path(fw->sources[0].paths[0], real, "debs/torch-2.7/a.deb");
  assert_path(fw->sources[0].paths[1], real, "debs/torch-2.7/b.deb");
  assert_string_equal(fw->sources[0].rel_paths[1], "debs/torch-2.7/b.deb");
  assert_string_equal(fw->sources[0].dest, "/");
  assert_int_equal(fw->sources[1].kind, ST_SOURCE_FILE);
  assert_path(fw->sources[1].paths[0], real, "hello.sh");
  assert_string_equal(fw->sources[1].dest, "/usr/local/bin/hello");
  assert_int_equal(fw->sources[1].mode, 0755);
  assert_int_equal(fw->n_deletes, 1);
  assert_string_equal(fw->deletes[0], "/etc/motd");
  assert_int_equal(fw->n_runs, 2);
  assert_string_equal(fw->runs[0], "ldconfig");
  assert_string_equal(fw->runs[1], "python3 -m compileall -q /usr/lib/python3");
}

static void test_example_instance(void **state) {
  struct fx *f = *state;
  example_tree(f->dir);
  st_recipe *r = load_ok(f->dir, "recipe.yaml");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  st_recipe_instance *ri = inst_ok(r, &cells[2]);
  assert_string_equal(ri->image, "pytorch");
  assert_string_equal(ri->tag, "2.7-cu12.4");
  assert_string_equal(ri->ref, "pytorch:2.7-cu12.4");
  assert_string_equal(ri->cell_name, "cuda=12.4,torch=2.7");
  check_example_layers(ri, f->real);
  assert_int_equal(ri->n_env, 2); /* sorted by key */
  assert_string_equal(ri->env[0].key, "CUDA_HOME");
  assert_string_equal(ri->env[0].value, "/usr/local/cuda");
  assert_string_equal(ri->env[1].key, "PATH");
  assert_string_equal(ri->env[1].value, "/usr/local/bin:/usr/bin:/bin");
  assert_int_equal(ri->n_labels, 2);
  assert_string_equal(ri->labels[0].key, "cuda");
  assert_string_equal(ri->labels[0].value, "12.4");
  assert_string_equal(ri->labels[1].key, "framework");
  assert_string_equal(ri->labels[1].value, "torch-2.7");
  assert_string_equal(ri->workdir, "/workspace");
  assert_int_equal(ri->n_entrypoint, 1);
  assert_string_equal(ri->entrypoint[0], "/bin/bash");
  st_recipe_instance_free(ri);
  st_cells_free(cells, n);
  st_recipe_free(r);
}

static const char canon_base[] = "strata-layer 1\n"
                                 "source dir rootfs dest=/ owner=0:0\n"
                                 "source archive extra-12.4.tar.gz dest=/opt/extra strip=1\n";
static const char canon_fw[] =
    "strata-layer 1\n"
    "source deb debs/torch-2.7/a.deb dest=/\n"
    "source deb debs/torch-2.7/b.deb dest=/\n"
    "source file hello.sh dest=/usr/local/bin/hello mode=0755 owner=0:0\n"
    "delete /etc/motd\n"
    "env CUDA_HOME=/usr/local/cuda\n"
    "env PATH=/usr/local/bin:/usr/bin:/bin\n"
    "run ldconfig\n"
    "run python3 -m compileall -q /usr/lib/python3\n";

/* Canonical text of layer li of the last cell of dir/recipe.yaml (malloc'd). */
static char *canon_of(const char *dir, size_t li) {
  st_recipe *r = load_ok(dir, "recipe.yaml");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  st_recipe_instance *ri = inst_ok(r, &cells[n - 1]);
  char *text = st_recipe_layer_canonical(ri, li);
  assert_non_null(text);
  st_recipe_instance_free(ri);
  st_cells_free(cells, n);
  st_recipe_free(r);
  return text;
}

static void expect_canon_change(const char *dir, size_t li, const char *from, const char *to,
                                bool changes) {
  char *before = canon_of(dir, li);
  char *text = strdup(example), *at = strstr(text, from);
  assert_non_null(at);
  char *edited = NULL;
  assert_true(asprintf(&edited, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from)) > 0);
  put(dir, "recipe.yaml", edited);
  char *after = canon_of(dir, li);
  if (changes != (strcmp(before, after) != 0))
    fail_msg("'%s' -> '%s': canonical text %s", from, to, changes ? "unchanged" : "changed");
  put(dir, "recipe.yaml", example);
  free(before);
  free(after);
  free(edited);
  free(text);
}

static void test_canonical(void **state) {
  struct fx *f = *state;
  example_tree(f->dir);
  char *a = canon_of(f->dir, 0), *b = canon_of(f->dir, 1);
  assert_string_equal(a, canon_base);
  assert_string_equal(b, canon_fw);
  free(a);
  free(b);
  /* the same recipe in another checkout gives the same text */
  char *other = tu_mkdtemp();
  example_tree(other);
  a = canon_of(other, 1);
  assert_string_equal(a, canon_fw);
  free(a);
  tu_rmtree(other);
  free(other);
  expect_canon_change(f->dir, 0, "strip: 1", "strip: 2", true);
  expect_canon_change(f->dir, 0, "dest: /opt/extra", "dest: /opt/other", true);
  expect_canon_change(f->dir, 0, "- dir: ./rootfs", "- dir: ./rootfs\n        owner: source",
                      true);
  expect_canon_change(f->dir, 1, "mode: \"0755\"", "mode: \"0700\"", true);
  expect_canon_change(f->dir, 1, "\"ldconfig\"", "\"ldconfig -v\"", true);
  expect_canon_change(f->dir, 1, "/etc/motd", "/etc/issue", true);
  expect_canon_change(f->dir, 1, "CUDA_HOME: /usr/local/cuda", "CUDA_HOME: /opt/cuda", true);
  /* the env only matters to layers with run steps; the layer name is not content */
  expect_canon_change(f->dir, 0, "CUDA_HOME: /usr/local/cuda", "CUDA_HOME: /opt/cuda", false);
  expect_canon_change(f->dir, 0, "name: base", "name: bottom", false);
  expect_canon_change(f->dir, 1, "workdir: /workspace", "workdir: /srv", false);
  put(f->dir, "debs/torch-2.7/c.deb", "c"); /* one more package matched by the glob */
  b = canon_of(f->dir, 1);
  assert_non_null(strstr(b, "source deb debs/torch-2.7/c.deb dest=/\n"));
  free(b);
}

static void test_defaults_and_dollars(void **state) {
  struct fx *f = *state;
  put(f->dir, "tool/hello.sh", "x");
  put(f->dir, "tree/a", "x");
  put(f->dir, "r.yaml", "image: registry.local/team/tools\n"
                        "layers:\n"
                        "  - name: l\n"
                        "    sources:\n"
                        "      - file: tool//hello.sh\n"
                        "      - file: ./tool/hello.sh\n"
                        "        dest: /usr/bin/\n"
                        "        owner: \"1000:100\"\n"
                        "      - dir: tree/\n"
                        "        dest: /srv/./x/\n"
                        "        owner: source\n"
                        "    run: [\"echo $HOME costs $$5 not $${x}\"]\n"
                        "config:\n"
                        "  entrypoint: []\n");
  st_recipe *r = load_ok(f->dir, "r.yaml");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  assert_int_equal(n, 1);
  assert_int_equal(cells[0].n, 0);
  char *name = st_cell_name(&cells[0]);
  assert_string_equal(name, "");
  free(name);
  st_recipe_instance *ri = inst_ok(r, &cells[0]);
  assert_string_equal(ri->ref, "registry.local/team/tools:latest");
  const st_recipe_source *s = ri->layers[0].sources;
  assert_string_equal(s[0].dest, "/hello.sh");
  assert_string_equal(s[0].rel_paths[0], "tool/hello.sh");
  assert_int_equal(s[0].mode, -1);
  assert_string_equal(s[1].dest, "/usr/bin/hello.sh");
  assert_int_equal(s[1].uid, 1000);
  assert_int_equal(s[1].gid, 100);
  assert_string_equal(s[2].dest, "/srv/x");
  assert_true(s[2].owner_source);
  assert_path(s[2].paths[0], f->real, "tree");
  assert_string_equal(ri->layers[0].runs[0], "echo $HOME costs $5 not ${x}");
  assert_int_equal(ri->n_entrypoint, 0);
  assert_null(ri->workdir);
  assert_int_equal(ri->n_env, 0);
  char *c = st_recipe_layer_canonical(ri, 0);
  assert_non_null(strstr(c, "source file tool/hello.sh dest=/usr/bin/hello.sh mode=keep "
                            "owner=1000:100\n"));
  assert_non_null(strstr(c, "source dir tree dest=/srv/x owner=source\n"));
  free(c);
  st_recipe_instance_free(ri);
  st_cells_free(cells, n);
  st_recipe_free(r);
}

static void test_cell_filter(void **state) {
  struct fx *f = *state;
  example_tree(f->dir);
  st_recipe *r = load_ok(f->dir, "recipe.yaml");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  struct {
    const char *spec;
    int matches[3];
  } ok[] = {{"cuda=12.4", {0, 1, 1}},
            {"cuda=12.4,torch=2.5", {0, 1, 0}},
            {"torch=2.5,cuda=12.1,cuda=12.4", {1, 1, 0}}};
  for (size_t i = 0; i < ST_ARRAY_SIZE(ok); i++) {
    st_cell_filter *flt = NULL;
    assert_int_equal(st_recipe_cell_filter_parse(r, ok[i].spec, &flt, NULL), 0);
    for (size_t c = 0; c < n; c++)
      assert_int_equal(st_cell_matches(flt, &cells[c]), ok[i].matches[c]);
    st_cell_filter_free(flt);
  }
  assert_true(st_cell_matches(NULL, &cells[0]));
  struct {
    const char *spec, *word;
  } bad[] = {{"gpu=a100", "unknown axis 'gpu' (axes: cuda, torch)"},
             {"cuda=11.8", "value '11.8' is not in axis 'cuda' (values: 12.1, 12.4)"},
             {"cuda", "expected AXIS=VALUE"},
             {"cuda=12.4,", "expected AXIS=VALUE"},
             {"", "empty"}};
  for (size_t i = 0; i < ST_ARRAY_SIZE(bad); i++) {
    st_cell_filter *flt = NULL;
    st_error err = {0};
    assert_int_equal(st_recipe_cell_filter_parse(r, bad[i].spec, &flt, &err), ST_EINVAL);
    assert_null(flt);
    if (!strstr(err.msg, bad[i].word))
      fail_msg("'%s': got '%s'", bad[i].spec, err.msg);
  }
  st_cells_free(cells, n);
  st_recipe_free(r);
}

static const char ext_base[] = "image: basic\n"
                               "tag: \"b-${cuda}-${os}\"\n"
                               "matrix:\n"
                               "  cuda: [\"11.8\", \"12.1\"]\n"
                               "  os: [jammy, noble]\n"
                               "  exclude:\n"
                               "    - {cuda: \"11.8\", os: noble}\n"
                               "layers:\n"
                               "  - name: os\n"
                               "    sources:\n"
                               "      - dir: ./rootfs\n"
                               "  - name: tools\n"
                               "    run: [\"apt-get install -y vim\"]\n"
                               "  - name: top\n"
                               "    delete: [/etc/motd]\n"
                               "config:\n"
                               "  env: {A: base-a, B: base-b}\n"
                               "  labels: {os: \"${os}\", team: infra}\n"
                               "  workdir: /base\n"
                               "  entrypoint: [/bin/sh]\n";
static const char ext_child[] = "extends: base/base.yaml\n"
                                "image: child\n"
                                "tag: \"${cuda}-${os}-${py}\"\n"
                                "matrix:\n"
                                "  cuda: [\"12.1\", \"12.4\"]\n"
                                "  py: [\"3.11\"]\n"
                                "  exclude:\n"
                                "    - {cuda: \"12.4\", os: noble}\n"
                                "layers:\n"
                                "  - name: tools\n"
                                "    sources:\n"
                                "      - file: ./tool.sh\n"
                                "  - name: app\n"
                                "    run: [make]\n"
                                "config:\n"
                                "  env: {B: child-b, C: child-c}\n"
                                "  labels: {team: ml}\n"
                                "  workdir: /child\n";

static void check_ext_instance(const st_recipe_instance *ri, const char *dir,
                               const char *real) {
  assert_string_equal(ri->ref, "child:12.1-jammy-3.11");
  assert_int_equal(ri->n_layers, 4); /* os, tools (replaced in place), top, app (appended) */
  const char *names[] = {"os", "tools", "top", "app"};
  for (size_t i = 0; i < 4; i++)
    assert_string_equal(ri->layers[i].name, names[i]);
  assert_path(ri->layers[0].sources[0].paths[0], real, "base/rootfs"); /* base's own dir */
  assert_path(ri->layers[0].sources[0].recipe_file, dir, "base/base.yaml");
  assert_int_equal(ri->layers[1].n_runs, 0);
  assert_path(ri->layers[1].sources[0].paths[0], real, "tool.sh");
  assert_path(ri->layers[1].recipe_file, dir, "child.yaml");
  assert_string_equal(ri->layers[2].deletes[0], "/etc/motd");
  assert_string_equal(ri->layers[3].runs[0], "make");
  assert_int_equal(ri->n_env, 3);
  assert_string_equal(ri->env[0].value, "base-a");
  assert_string_equal(ri->env[1].value, "child-b");
  assert_string_equal(ri->env[2].value, "child-c");
  assert_int_equal(ri->n_labels, 2);
  assert_string_equal(ri->labels[0].value, "jammy");
  assert_string_equal(ri->labels[1].value, "ml");
  assert_string_equal(ri->workdir, "/child");
  assert_string_equal(ri->entrypoint[0], "/bin/sh");
}

static void test_extends_merge(void **state) {
  struct fx *f = *state;
  put(f->dir, "base/base.yaml", ext_base);
  put(f->dir, "base/rootfs/etc/os-release", "x");
  put(f->dir, "child.yaml", ext_child);
  put(f->dir, "tool.sh", "x");
  st_recipe *r = load_ok(f->dir, "child.yaml");
  assert_string_equal(st_recipe_image(r), "child");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  /* cuda replaced in place, os kept, py appended; the base's exclusion of 11.8 is inert,
   * the child's removes 12.4/noble */
  const char *want[] = {"cuda=12.1,os=jammy,py=3.11", "cuda=12.1,os=noble,py=3.11",
                        "cuda=12.4,os=jammy,py=3.11"};
  assert_int_equal(n, 3);
  for (size_t i = 0; i < n; i++) {
    char *name = st_cell_name(&cells[i]);
    assert_string_equal(name, want[i]);
    free(name);
  }
  st_recipe_instance *ri = inst_ok(r, &cells[0]);
  check_ext_instance(ri, f->dir, f->real);
  st_recipe_instance_free(ri);
  st_cells_free(cells, n);
  st_recipe_free(r);
  /* the base alone is a recipe too, with its own cells */
  r = load_ok(f->dir, "base/base.yaml");
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  assert_int_equal(n, 3);
  st_cells_free(cells, n);
  st_recipe_free(r);
}

static void test_extends_chain(void **state) {
  struct fx *f = *state;
  put(f->dir, "x/y/c.yaml", "image: gamma\ntag: c\nlayers:\n  - name: one\n"
                            "    sources: [{file: c.txt}]\nconfig: {labels: {from: c}}\n");
  put(f->dir, "x/y/c.txt", "c");
  put(f->dir, "x/b.yaml", "extends: y/c.yaml\ntag: b\nlayers:\n  - name: two\n"
                          "    sources: [{file: ../b.txt, dest: /b}]\n");
  put(f->dir, "b.txt", "b");
  put(f->dir, "a.yaml", "extends: x/b.yaml\ntag: a\nconfig: {labels: {level: a}}\n");
  st_recipe *r = load_ok(f->dir, "a.yaml");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  st_recipe_instance *ri = inst_ok(r, &cells[0]);
  assert_string_equal(ri->ref, "gamma:a");
  assert_int_equal(ri->n_layers, 2);
  assert_path(ri->layers[0].sources[0].paths[0], f->real, "x/y/c.txt");
  assert_path(ri->layers[0].sources[0].recipe_file, f->dir, "x/y/c.yaml");
  assert_path(ri->layers[1].sources[0].paths[0], f->real, "x/../b.txt");
  assert_int_equal(ri->n_labels, 2);
  assert_string_equal(ri->labels[0].key, "from");
  assert_string_equal(ri->labels[1].value, "a");
  char *c = st_recipe_layer_canonical(ri, 1);
  assert_string_equal(c, "strata-layer 1\nsource file ../b.txt dest=/b mode=keep owner=0:0\n");
  free(c);
  st_recipe_instance_free(ri);
  st_cells_free(cells, n);
  st_recipe_free(r);
}

static void test_extends_errors(void **state) {
  struct fx *f = *state;
  put(f->dir, "cyc/a.yaml", "extends: b.yaml\nimage: a\n");
  put(f->dir, "cyc/b.yaml", "image: b\nextends: a.yaml\n");
  char *msg = NULL;
  assert_true(asprintf(&msg, "extends cycle: %s/cyc/a.yaml -> %s/cyc/b.yaml -> %s/cyc/a.yaml",
                       f->dir, f->dir, f->dir) > 0);
  load_fails_at(f->dir, "cyc/a.yaml", "cyc/b.yaml", ST_EFORMAT, "2:1", msg);
  free(msg);
  put(f->dir, "self.yaml", "image: s\nlayers: [{name: l, run: [x]}]\nextends: ./self.yaml\n");
  load_fails_at(f->dir, "self.yaml", "self.yaml", ST_EFORMAT, "3:1", "extends cycle");
  put(f->dir, "orphan.yaml", "image: o\n\nextends: gone/base.yaml\n");
  load_fails_at(f->dir, "orphan.yaml", "orphan.yaml", ST_ENOENT, "3:1", "gone/base.yaml");
  /* errors inside a base name the base file */
  put(f->dir, "sub/bad.yaml", "image: b\nlayers:\n  - name: l\n    runs: [x]\n");
  put(f->dir, "uses-bad.yaml", "extends: sub/bad.yaml\n");
  load_fails_at(f->dir, "uses-bad.yaml", "sub/bad.yaml", ST_EFORMAT, "4:5",
                "unknown key 'runs'");
  /* a child's exclusion must name values of the merged matrix */
  put(f->dir, "m/base.yaml", "image: m\ntag: \"${v}\"\nmatrix: {v: [a, b]}\n"
                             "layers: [{name: l, run: [x]}]\n");
  put(f->dir, "m/child.yaml", "extends: base.yaml\nmatrix:\n  exclude: [{v: c}]\n");
  load_fails_at(f->dir, "m/child.yaml", "m/child.yaml", ST_EFORMAT, "3:17",
                "value 'c' is not in axis 'v'");
  /* a base needs no image of its own, the final recipe does */
  put(f->dir, "n/base.yaml", "layers: [{name: l, run: [x]}]\n");
  put(f->dir, "n/child.yaml", "extends: base.yaml\n");
  load_fails_at(f->dir, "n/child.yaml", "n/child.yaml", ST_EFORMAT, "1:1",
                "missing required key 'image'");
  put(f->dir, "n/ok.yaml", "extends: base.yaml\nimage: fine\n");
  st_recipe_free(load_ok(f->dir, "n/ok.yaml"));
}

/* A valid recipe is HEAD + LAYER; error cases change one thing. */
#define HEAD "image: app\n"
#define LAYER "layers:\n  - name: l\n    run: [\"true\"]\n"
#define SRC(s) "layers:\n  - name: l\n    sources:\n      - " s "\n"
#define MATRIX(m) "image: app\ntag: \"${a}\"\nmatrix:\n" m LAYER

static const struct err_case {
  const char *text, *where, *word;
} err_cases[] = {
    /* keys and types */
    {HEAD LAYER "colour: red\n", "5:1", "unknown key 'colour' in the recipe"},
    {HEAD "layers:\n  - name: l\n    run: [x]\n    runs: [y]\n", "5:5", "unknown key 'runs'"},
    {HEAD SRC("dir: d\n        size: 3"), "6:9", "unknown key 'size' in a source"},
    {HEAD LAYER "config: {env: {}, user: root}\n", "5:19", "unknown key 'user' in config"},
    {"image: [app]\n" LAYER, "1:8", "'image' must be a string, not a sequence"},
    {HEAD "layers: {name: l}\n", "2:9", "'layers' must be a sequence, not a mapping"},
    {HEAD LAYER "config: [a]\n", "5:9", "'config' must be a mapping"},
    {HEAD "layers:\n  - name: l\n    run: ldconfig\n", "4:10", "'run' must be a sequence"},
    {HEAD "layers:\n  - name: l\n    run: [[a]]\n", "4:11", "a run command must be a string"},
    {HEAD LAYER "config: {env: {A: [1]}}\n", "5:19", "env must be a string"},
    {HEAD LAYER "matrix:\n", "5:8", "'matrix' must be a mapping, not an empty value"},
    {HEAD "layers:\n  - just-a-name\n", "3:5", "a layer must be a mapping, not a string"},
    /* required keys */
    {LAYER, "1:1", "missing required key 'image'"},
    {HEAD, "1:1", "missing required key 'layers'"},
    {HEAD "layers: []\n", "2:9", "layers is empty"},
    {HEAD "layers:\n  - run: [x]\n", "3:5", "missing required key 'name'"},
    {HEAD "layers:\n  - name: l\n    sources: []\n", "3:5", "layer 'l' is empty"},
    {HEAD "layers:\n  - name: l\n    run: [x]\n  - name: l\n    run: [y]\n", "5:11",
     "duplicate layer name 'l' (first at line 3)"},
    {HEAD "layers:\n  - name: \"a b\"\n    run: [x]\n", "3:11", "layer name"},
    /* sources */
    {HEAD SRC("dest: /x"), "5:9", "a source needs one of dir, archive, deb, file"},
    {HEAD SRC("dir: a\n        file: b"), "6:9", "has 'dir' and 'file'"},
    {HEAD SRC("dir: \"\""), "5:14", "dir: empty path"},
    {HEAD SRC("archive: a.tgz\n        strip: -1"), "6:16", "strip must be a non-negative"},
    {HEAD SRC("archive: a.tgz\n        strip: one"), "6:16", "strip must be a non-negative"},
    {HEAD SRC("dir: d\n        strip: 1"), "6:9", "'strip' only applies to archive sources"},
    {HEAD SRC("file: f\n        mode: \"0855\""), "6:15", "mode must be an octal string"},
    {HEAD SRC("file: f\n        mode: \"07555\""), "6:15", "mode must be an octal string"},
    {HEAD SRC("deb: d.deb\n        mode: \"0644\""), "6:9", "'mode' only applies to file"},
    {HEAD SRC("file: f\n        dest: usr/bin/f"), "6:15", "dest must be an absolute path"},
    {HEAD SRC("file: f\n        dest: /usr/../f"), "6:15", "dest must not contain '..'"},
    {HEAD SRC("file: f\n        owner: root"), "6:16", "owner must be \"UID:GID\""},
    {HEAD SRC("archive: a\n        owner: \"0:0\""), "6:9", "'owner' only applies to dir and file"},
    /* delete and run */
    {HEAD "layers:\n  - name: l\n    delete: [etc/motd]\n", "4:14", "delete must be an absolute"},
    {HEAD "layers:\n  - name: l\n    delete: [/etc/../x]\n", "4:14", "must not contain '..'"},
    {HEAD "layers:\n  - name: l\n    delete: [\"//\"]\n", "4:14", "cannot delete '/'"},
    {HEAD "layers:\n  - name: l\n    run: [\" \"]\n", "4:11", "run: empty command"},
    /* variables */
    {HEAD "tag: \"v${x}\"\n" LAYER, "2:6",
     "undefined variable '${x}' (the recipe has no matrix)"},
    {MATRIX("  a: [\"1\"]\n") "config: {labels: {l: \"${b}\"}}\n", "8:22",
     "undefined variable '${b}'"},
    {MATRIX("  a: [\"1\"]\n") "config: {env: {E: \"${b}\"}}\n", "8:19", "undefined variable"},
    {MATRIX("  a: [\"1\"]\n") "config: {workdir: \"/${b}\"}\n", "8:19", "undefined variable"},
    {MATRIX("  a: [\"1\"]\n") "config: {entrypoint: [\"${b}\"]}\n", "8:23", "undefined variable"},
    {HEAD SRC("file: \"${x}.sh\""), "5:9", "undefined variable '${x}'"},
    {HEAD SRC("file: f\n        dest: \"/${x}\""), "6:15", "undefined variable '${x}'"},
    {HEAD "layers:\n  - name: l\n    run: [\"echo ${HOME}\"]\n", "4:11", "undefined variable"},
    {HEAD "layers:\n  - name: l\n    delete: [\"/${y}\"]\n", "4:14", "undefined variable"},
    {HEAD "tag: \"v${x\"\n" LAYER, "2:6", "unterminated '${'"},
    {HEAD "tag: \"v${}\"\n" LAYER, "2:6", "malformed variable '${}'"},
    {HEAD "tag: \"${1a}\"\n" LAYER, "2:6", "malformed variable '${1a}'"},
    /* matrix */
    {MATRIX("  a: []\n"), "4:6", "matrix axis 'a' has no values"},
    {MATRIX("  a: [\"1\", \"2\", \"1\"]\n"), "4:17", "duplicate value '1' in axis 'a'"},
    {MATRIX("  a: [\"1\"]\n  exclude: [\"2\"]\n"), "5:3", "axis cannot be named 'exclude'"},
    {MATRIX("  a: [\"1\"]\n  exclude: [{b: \"1\"}]\n"), "5:14", "exclude: unknown axis 'b'"},
    {MATRIX("  a: [\"1\"]\n  exclude: [{a: \"2\"}]\n"), "5:17", "value '2' is not in axis 'a'"},
    {MATRIX("  a: [\"1\"]\n  exclude: [{a: \"1\"}]\n"), "3:1",
     "every cell of the matrix is excluded"},
    {MATRIX("  a: [\"1\"]\n  exclude: [{}]\n"), "5:13", "exclude entry is empty"},
    {MATRIX("  a-b: [\"1\"]\n"), "4:3", "not a variable name"},
    {MATRIX("  a: [\"x y\"]\n"), "4:7", "must be non-empty, without spaces"},
    {"image: app\nmatrix: {}\n" LAYER, "2:9", "matrix has no axes"},
    {"image: app\nmatrix: {a: [\"1\", \"2\"]}\n" LAYER, "1:1",
     "two cells get the same tag 'latest'"},
    /* names and tags */
    {"image: PyTorch\n" LAYER, "1:8", "image name 'PyTorch' is not valid"},
    {"image: a//b\n" LAYER, "1:8", "image name"},
    {HEAD "tag: \"a b\"\n" LAYER, "2:6", "tag 'a b' is not valid"},
    {MATRIX("  a: [\"1\", \".x\"]\n"), "2:6", "tag '.x' is not valid"},
    /* YAML itself */
    {"image: [app\n" LAYER, "2:7", "invalid YAML"},
    {"image: app\n layers: x\n", "2:8", "invalid YAML: mapping values are not allowed"},
    {"image: &n app\n" LAYER, "1:8", "anchors and aliases are not supported"},
    {"image: app\ntag: *n\n" LAYER, "2:6", "anchors and aliases are not supported"},
    {"image: !!str app\n" LAYER, "1:8", "YAML tags are not supported"},
    {HEAD LAYER "---\nimage: b\n", "5:1", "more than one YAML document"},
    {HEAD "image: b\n" LAYER, "2:1", "duplicate key 'image' (first at line 1)"},
    {"- image: app\n", "1:1", "a recipe must be a mapping, not a sequence"},
    {"just text\n", "1:1", "a recipe must be a mapping, not a string"},
    {"", "1:1", "empty recipe"},
    {"# only a comment\n", "1:1", "empty recipe"},
    {"image: caf\xe9\n" LAYER, "1:12", "UTF-8"},
    {"image: app\ntag: \"a\\0b\"\n" LAYER, "2:6", "NUL character"},
    {"{[a]: b}\n", "1:2", "mapping keys must be plain strings"},
    {"a: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
     "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
     "1:35", "nested deeper than 32 levels"},
};

static void test_errors(void **state) {
  struct fx *f = *state;
  int failed = 0;
  for (size_t i = 0; i < ST_ARRAY_SIZE(err_cases); i++) {
    const struct err_case *c = &err_cases[i];
    st_recipe *r = NULL;
    st_error err = {0};
    int rc = st_recipe_load_text(&r, "r.yaml", f->dir, c->text, strlen(c->text), &err);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "r.yaml:%s: ", c->where);
    if (rc != ST_EFORMAT || strncmp(err.msg, prefix, strlen(prefix)) || !strstr(err.msg, c->word)) {
      print_error("case %zu: want '%s...%s', got %d '%s'\n%s", i, prefix, c->word, rc, err.msg,
                  c->text);
      failed++;
    }
    assert_null(r);
    assert_null(strchr(err.msg, '\n'));
    st_recipe_free(r);
  }
  assert_int_equal(failed, 0);
}

/* Instantiates the only cell of text (loaded from dir/r.yaml); expects code at WHERE. */
static void inst_fails_at(const char *dir, const char *text, int code, const char *where,
                          const char *word) {
  put(dir, "r.yaml", text);
  st_recipe *r = load_ok(dir, "r.yaml");
  st_cell *cells = NULL;
  size_t n = 0;
  assert_int_equal(st_recipe_cells(r, &cells, &n, NULL), 0);
  st_recipe_instance *ri = NULL;
  st_error err = {0};
  int rc = st_recipe_instantiate(r, &cells[n - 1], &ri, &err);
  char *prefix = NULL;
  assert_true(asprintf(&prefix, "%s/r.yaml:%s: ", dir, where) > 0);
  if (rc != code || strncmp(err.msg, prefix, strlen(prefix)) || !strstr(err.msg, word))
    fail_msg("want %d '%s...%s', got %d '%s'", code, prefix, word, rc, err.msg);
  assert_null(ri);
  free(prefix);
  st_cells_free(cells, n);
  st_recipe_free(r);
}

static void test_instantiate_errors(void **state) {
  struct fx *f = *state;
  put(f->dir, "afile", "x");
  put(f->dir, "debs/sub.deb/inner", "a directory named like a package");
  inst_fails_at(f->dir, HEAD SRC("dir: ./missing"), ST_ENOENT, "5:9", "dir: cannot find");
  inst_fails_at(f->dir, HEAD SRC("dir: afile"), ST_EFORMAT, "5:9", "is not a directory");
  inst_fails_at(f->dir, HEAD SRC("file: debs"), ST_EFORMAT, "5:9", "is not a regular file");
  inst_fails_at(f->dir, HEAD SRC("archive: none.tar"), ST_ENOENT, "5:9", "none.tar");
  inst_fails_at(f->dir, HEAD SRC("deb: ./debs/*.none"), ST_ENOENT, "5:9",
                "deb: no file matches './debs/*.none'");
  inst_fails_at(f->dir, HEAD SRC("deb: ./debs/*.deb"), ST_EFORMAT, "5:9",
                "is not a regular file");
  inst_fails_at(f->dir, "image: app\ntag: \"v${a}\"\nmatrix:\n  a: [\"1\", \"..\"]\n" LAYER
                "    delete: [\"/x/${a}\"]\n",
                ST_EFORMAT, "8:14", "absolute path without '..'");
  inst_fails_at(f->dir, "image: app\ntag: \"v${a}\"\nmatrix:\n  a: [\"1\", \"..\"]\n"
                        "layers:\n  - name: l\n    sources:\n      - file: afile\n"
                        "        dest: \"/opt/${a}/f\"\n",
                ST_EFORMAT, "9:15", "absolute path without '..'");
  /* a cell that is not one of the recipe's */
  put(f->dir, "r.yaml", HEAD LAYER);
  st_recipe *r = load_ok(f->dir, "r.yaml");
  char *names[] = {"a"}, *values[] = {"1"};
  st_cell alien = {1, names, values};
  st_recipe_instance *ri = NULL;
  st_error err = {0};
  assert_int_equal(st_recipe_instantiate(r, &alien, &ri, &err), ST_EINVAL);
  assert_non_null(strstr(err.msg, "'a=1' is not a cell of this recipe"));
  st_recipe_free(r);
}

static void test_file_errors(void **state) {
  struct fx *f = *state;
  load_fails_at(f->dir, "absent.yaml", "absent.yaml", ST_ENOENT, "1:1", "cannot read");
  put(f->dir, "adir/x", "x");
  load_fails_at(f->dir, "adir", "adir", ST_EFORMAT, "1:1", "not a regular file");
  size_t big = ST_RECIPE_MAX_BYTES + 1;
  char *text = malloc(big);
  memset(text, '#', big);
  tu_write(f->dir, "big.yaml", text, big);
  load_fails_at(f->dir, "big.yaml", "big.yaml", ST_EFORMAT, "1:1", "larger than");
  st_recipe *r = NULL;
  st_error err = {0};
  assert_int_equal(st_recipe_load_text(&r, "big.yaml", NULL, text, big, &err), ST_EFORMAT);
  assert_non_null(strstr(err.msg, "big.yaml:1:1: recipe: larger than"));
  free(text);
  /* UTF-16 with a byte order mark is not UTF-8 */
  tu_write(f->dir, "u16.yaml", "\xff\xfei\0m\0", 6);
  load_fails_at(f->dir, "u16.yaml", "u16.yaml", ST_EFORMAT, "1:1", "UTF-8");
  put(f->dir, "late.yaml", HEAD "tag: ok\n" LAYER "# \xc3\x28\n");
  load_fails_at(f->dir, "late.yaml", "late.yaml", ST_EFORMAT, "6:4", "UTF-8");
}

static void append(char **buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(char **buf, const char *fmt, ...) {
  char *more = NULL;
  va_list ap;
  va_start(ap, fmt);
  assert_true(vasprintf(&more, fmt, ap) >= 0);
  va_end(ap);
  char *joined = NULL;
  assert_true(asprintf(&joined, "%s%s", *buf ? *buf : "", more) >= 0);
  free(*buf);
  free(more);
  *buf = joined;
}

static void limit_fails(const char *text, const char *where, const char *word) {
  st_recipe *r = NULL;
  st_error err = {0};
  assert_int_equal(st_recipe_load_text(&r, "r.yaml", "/nonexistent", text, strlen(text), &err),
                   ST_EFORMAT);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "r.yaml:%s: ", where);
  if (strncmp(err.msg, prefix, strlen(prefix)) || !strstr(err.msg, word))
    fail_msg("want '%s...%s', got '%s'", prefix, word, err.msg);
}

static void test_limits(void **state) {
  char *t = NULL;
  append(&t, "image: many\nlayers:\n");
  for (int i = 0; i < 65; i++)
    append(&t, "  - {name: l%d, run: [x]}\n", i);
  limit_fails(t, "3:3", "more than 64 layers");
  free(t);
  t = NULL;
  append(&t, "image: axes\ntag: t\nmatrix:\n");
  for (int i = 0; i < 17; i++)
    append(&t, "  a%d: [\"1\"]\n", i);
  append(&t, "layers: [{name: l, run: [x]}]\n");
  limit_fails(t, "20:3", "more than 16 matrix axes");
  free(t);
  t = NULL;
  append(&t, "image: cells\ntag: \"${a}-${b}\"\nmatrix:\n  a: [");
  for (int i = 0; i < 17; i++)
    append(&t, "%sv%d", i ? ", " : "", i);
  append(&t, "]\n  b: [");
  for (int i = 0; i < 16; i++)
    append(&t, "%sv%d", i ? ", " : "", i);
  append(&t, "]\nlayers: [{name: l, run: [x]}]\n");
  limit_fails(t, "3:1", "matrix has 272 cells (at most 256)");
  free(t);
  t = NULL;
  append(&t, "image: combos\ntag: t\nmatrix:\n");
  for (int i = 0; i < 13; i++)
    append(&t, "  a%d: [\"1\", \"2\"]\n", i);
  append(&t, "layers: [{name: l, run: [x]}]\n");
  limit_fails(t, "3:1", "more than 4096 combinations");
  free(t);
  t = NULL;
  append(&t, "image: long\ntag: t\nmatrix: {a: [");
  for (int i = 0; i < 200; i++)
    append(&t, "a");
  append(&t, "]}\nlayers: [{name: l, run: [\"");
  for (int i = 0; i < 400; i++)
    append(&t, "${a}");
  append(&t, "\"]}]\n");
  limit_fails(t, "4:26", "longer than 65536 bytes after substitution");
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_example_cells, setup, teardown),
      cmocka_unit_test_setup_teardown(test_example_instance, setup, teardown),
      cmocka_unit_test_setup_teardown(test_canonical, setup, teardown),
      cmocka_unit_test_setup_teardown(test_defaults_and_dollars, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cell_filter, setup, teardown),
      cmocka_unit_test_setup_teardown(test_extends_merge, setup, teardown),
      cmocka_unit_test_setup_teardown(test_extends_chain, setup, teardown),
      cmocka_unit_test_setup_teardown(test_extends_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_instantiate_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_file_errors, setup, teardown),
      cmocka_unit_test(test_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
