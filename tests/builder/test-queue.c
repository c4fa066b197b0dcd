/* SPDX-License-Identifier: Apache-2.0 */
/* Build contexts and the build queue: the context layout and what cannot be sent, a build
 * from a context giving the image a local build gives, identical submissions, event
 * histories for late watchers, layer reuse across materialisations, invalid and unsafe
 * requests recorded nowhere, failing builds, run-step logs, cancel of queued and running
 * builds, the concurrency limit, shutdown and restart recovery, damaged records. */
#include "testutil.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build.h"
#include "cleanup.h"
#include "context.h"
#include "image.h"
#include "layer-index.h"
#include "queue.h"
#include "source.h"

struct fx {
  char *dir;
  char client[PATH_MAX], server[PATH_MAX], work[PATH_MAX], tmp[PATH_MAX];
  st_store *c, *s; /* the client's store, the server's store */
};

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp();
  snprintf(f->client, sizeof f->client, "%s/client", f->dir);
  snprintf(f->server, sizeof f->server, "%s/server", f->dir);
  snprintf(f->work, sizeof f->work, "%s/w", f->dir);
  snprintf(f->tmp, sizeof f->tmp, "%s/tmp", f->dir);
  mkdir(f->work, 0755);
  mkdir(f->tmp, 0755);
  st_error err = {0};
  assert_int_equal(st_store_open(&f->c, f->client, ST_STORE_CREATE, &err), 0);
  assert_int_equal(st_store_open(&f->s, f->server, ST_STORE_CREATE, &err), 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  st_store_free(f->c);
  st_store_free(f->s);
  tu_rmtree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

static void wfile(struct fx *f, const char *rel, const char *text) {
  tu_write(f->work, rel, text, strlen(text));
}

static st_build_queue *open_queue(struct fx *f, unsigned workers) {
  st_build_queue_opts o = {.workers = workers, .threads = 2, .tmpdir = f->tmp};
  st_build_queue *q = NULL;
  st_error err = {0};
  int rc = st_build_queue_open(&q, f->s, &o, &err);
  if (rc)
    fail_msg("open: %s", err.msg);
  return q;
}

/* What a client's upload does: every object of the client store into the server's. */
struct copy {
  st_store *from, *to;
  st_kind kind;
};

static int copy_one(const st_digest *d, uint64_t size, void *ud) {
  struct copy *c = ud;
  uint8_t *frame = NULL;
  size_t flen;
  st_error err = {0};
  assert_int_equal(st_store_get_frame(c->from, c->kind, d, &frame, &flen, &err), 0);
  assert_int_equal(st_store_put_frame(c->to, c->kind, d, frame, flen, &err), 0);
  free(frame);
  return 0;
}

static void upload(struct fx *f) {
  st_error err = {0};
  assert_int_equal(st_store_flush(f->c, &err), 0);
  for (int k = 0; k < ST_KIND_COUNT; k++) {
    struct copy c = {f->c, f->s, (st_kind)k};
    assert_int_equal(st_store_list(f->c, (st_kind)k, copy_one, &c, &err), 0);
  }
  assert_int_equal(st_store_flush(f->s, &err), 0);
}

static void pack(struct fx *f, const char *recipe, const char *cells, st_build_request *req) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", f->work, recipe);
  st_error err = {0};
  int rc = st_build_context_pack(f->c, path, cells, 0, 2, req, NULL, &err);
  if (rc)
    fail_msg("pack %s: %s", recipe, err.msg);
}

static st_digest submit(st_build_queue *q, const st_build_request *req, bool *existing) {
  st_digest id;
  st_error err = {0};
  int rc = st_build_queue_submit(q, req, &id, existing, &err);
  if (rc)
    fail_msg("submit: %s", err.msg);
  return id;
}

/* Every event of the build until it ends (generous safety limit, not a timing check). */
static st_bevent *wait_done(st_build_queue *q, const st_digest *id, size_t *n_out) {
  st_bevent *all = NULL;
  size_t n = 0;
  uint64_t after = 0;
  for (int rounds = 0; rounds < 600; rounds++) {
    st_bevent *v = NULL;
    size_t k = 0;
    bool done = false;
    st_error err = {0};
    assert_int_equal(st_build_queue_events(q, id, after, 1000, &v, &k, &done, &err), 0);
    all = realloc(all, (n + k + 1) * sizeof *all);
    memcpy(all + n, v, k * sizeof *v);
    free(v);
    n += k;
    if (k)
      after = all[n - 1].seq;
    if (done) {
      *n_out = n;
      return all;
    }
  }
  fail_msg("the build did not end");
  return NULL;
}

/* Waits for the end of the build, dropping its events. */
static void drain(st_build_queue *q, const st_digest *id) {
  size_t n = 0;
  st_bevent *v = wait_done(q, id, &n);
  st_bevents_free(v, n);
}

static st_build_info *get(st_build_queue *q, const st_digest *id) {
  st_build_info *info = NULL;
  st_error err = {0};
  assert_int_equal(st_build_queue_get(q, id, &info, &err), 0);
  return info;
}

/* Waits until the build printed a line containing text. */
static void wait_log(st_build_queue *q, const st_digest *id, const char *text) {
  uint64_t after = 0;
  for (int rounds = 0; rounds < 600; rounds++) {
    st_bevent *v = NULL;
    size_t k = 0;
    bool done = false;
    st_error err = {0};
    assert_int_equal(st_build_queue_events(q, id, after, 1000, &v, &k, &done, &err), 0);
    bool seen = false;
    for (size_t i = 0; i < k; i++) {
      seen |= v[i].kind == ST_BEV_LOG && strstr(v[i].text, text);
      after = v[i].seq;
    }
    st_bevents_free(v, k);
    if (seen)
      return;
    assert_false(done);
  }
  fail_msg("no log line '%s'", text);
}

static size_t count_layer(const st_bevent *v, size_t n, st_layer_state st) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += v[i].kind == ST_BEV_LAYER && v[i].layer_state == st;
  return c;
}

static size_t dir_entries(const char *path) {
  DIR *d = opendir(path);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    n += de->d_name[0] != '.';
  closedir(d);
  return n;
}

/* A recipe in app/ that extends a base in common/ and reads ../data and ./hello.sh. */
static void simple_tree(struct fx *f) {
  wfile(f, "common/base.yaml", "image: demo\nconfig:\n  env: {A: b}\n");
  wfile(f, "app/r.yaml",
        "extends: ../common/base.yaml\n"
        "tag: \"${v}\"\n"
        "matrix:\n  v: [one, two]\n"
        "layers:\n"
        "  - name: data\n    sources:\n      - dir: ../data\n        dest: /data\n"
        "  - name: tool\n    sources:\n      - file: ./hello.sh\n        dest: /bin/hello-${v}\n"
        "        mode: \"0755\"\n");
  wfile(f, "app/hello.sh", "#!/bin/sh\necho hello\n");
  wfile(f, "data/a.txt", "alpha\n");
  wfile(f, "data/sub/b.txt", "beta\n");
  wfile(f, "unrelated/big", "not part of any context\n");
}

static void test_context_layout(void **state) {
  struct fx *f = *state;
  simple_tree(f);
  st_build_request req = {0};
  pack(f, "app/r.yaml", "v=one", &req);
  assert_string_equal(req.recipe_name, "app/r.yaml");
  assert_string_equal(req.cells, "v=one");
  assert_true(req.has_context);
  assert_true(strstr(req.recipe_text, "extends: ../common/base.yaml") != NULL);
  st_layer_index *idx = NULL;
  st_error err = {0};
  assert_int_equal(st_layer_index_load(&idx, f->c, &req.context, &err), 0);
  const char *want[] = {"common/base.yaml", "data/a.txt", "data/sub/b.txt", "app/hello.sh"};
  for (size_t i = 0; i < ST_ARRAY_SIZE(want); i++)
    assert_non_null(st_layer_index_find(idx, want[i]));
  assert_null(st_layer_index_find(idx, "unrelated/big"));
  assert_null(st_layer_index_find(idx, "app/r.yaml")); /* the text travels apart */
  st_layer_index_free(idx);
  /* packing again gives the same context */
  st_build_request again = {0};
  pack(f, "app/r.yaml", "v=one", &again);
  assert_memory_equal(&req.context, &again.context, sizeof req.context);
  st_build_request_clear(&req);
  st_build_request_clear(&again);
}

static void test_context_errors(void **state) {
  struct fx *f = *state;
  char abs[PATH_MAX + 64];
  snprintf(abs, sizeof abs, "image: x\nlayers:\n  - name: l\n    sources:\n      - file: %s/f\n",
           f->work);
  wfile(f, "f", "x");
  wfile(f, "abs.yaml", abs);
  wfile(f, "bad.yaml", "image: x\nlayers:\n  - name: l\n    sources:\n      - dri: ./f\n");
  wfile(f, "cells.yaml",
        "image: x\ntag: \"${v}\"\nmatrix:\n  v: [a]\nlayers:\n  - name: l\n    run: [true]\n");
  st_build_request req = {0};
  st_error err = {0};
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/abs.yaml", f->work);
  assert_int_equal(st_build_context_pack(f->c, path, NULL, 0, 0, &req, NULL, &err), ST_EFORMAT);
  assert_true(strstr(err.msg, "abs.yaml:5:9: layer 'l': absolute input path") != NULL);
  snprintf(path, sizeof path, "%s/bad.yaml", f->work);
  assert_int_equal(st_build_context_pack(f->c, path, NULL, 0, 0, &req, NULL, &err), ST_EFORMAT);
  assert_true(strstr(err.msg, "bad.yaml:5:9:") != NULL);
  snprintf(path, sizeof path, "%s/cells.yaml", f->work);
  assert_int_equal(st_build_context_pack(f->c, path, "v=b", 0, 0, &req, NULL, &err), ST_EINVAL);
  /* a recipe that reads no file needs no context */
  assert_int_equal(st_build_context_pack(f->c, path, NULL, 0, 0, &req, NULL, &err), 0);
  assert_false(req.has_context);
  assert_string_equal(req.recipe_name, "cells.yaml");
  st_build_request_clear(&req);
}

/* A build from the uploaded context gives the image a local build of the recipe gives. */
static void test_build_matches_local(void **state) {
  struct fx *f = *state;
  simple_tree(f);
  st_build_request req = {0};
  pack(f, "app/r.yaml", NULL, &req);
  upload(f);
  st_build_queue *q = open_queue(f, 1);
  bool existing = true;
  st_digest id = submit(q, &req, &existing);
  assert_false(existing);
  size_t n = 0;
  st_bevent *ev = wait_done(q, &id, &n);
  st_build_info *info = get(q, &id);
  assert_int_equal(info->state, ST_BUILD_SUCCEEDED);
  assert_int_equal(info->n_images, 2);
  assert_string_equal(info->images[0].ref, "demo:one");
  assert_string_equal(info->images[1].ref, "demo:two");
  assert_string_equal(info->images[1].cell, "v=two");
  assert_true(info->finished >= info->started && info->started >= info->submitted);
  /* the history: queued, running, per layer queued -> running -> done, images, succeeded */
  assert_int_equal(ev[0].kind, ST_BEV_STATE);
  assert_int_equal(ev[0].state, ST_BUILD_QUEUED);
  assert_int_equal(ev[1].state, ST_BUILD_RUNNING);
  assert_int_equal(ev[n - 1].kind, ST_BEV_STATE);
  assert_int_equal(ev[n - 1].state, ST_BUILD_SUCCEEDED);
  assert_int_equal(count_layer(ev, n, ST_LAYER_QUEUED), 4);
  /* cell two reuses cell one's data layer */
  assert_int_equal(count_layer(ev, n, ST_LAYER_DONE) + count_layer(ev, n, ST_LAYER_CACHED), 4);
  assert_int_equal(count_layer(ev, n, ST_LAYER_CACHED), 1);
  for (size_t i = 1; i < n; i++)
    assert_true(ev[i].seq > ev[i - 1].seq);
  for (size_t i = 0; i < n; i++)
    if (ev[i].kind == ST_BEV_LAYER && ev[i].layer_state == ST_LAYER_DONE)
      assert_true(ev[i].bytes > 0 && ev[i].count == 2);

  /* the same recipe built locally */
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/app/r.yaml", f->work);
  st_recipe *r = NULL;
  st_cell *cells = NULL;
  size_t nc = 0;
  st_error err = {0};
  assert_int_equal(st_recipe_load(&r, path, &err), 0);
  assert_int_equal(st_recipe_cells(r, &cells, &nc, &err), 0);
  for (size_t i = 0; i < nc; i++) {
    st_recipe_instance *ri = NULL;
    assert_int_equal(st_recipe_instantiate(r, &cells[i], &ri, &err), 0);
    st_build_opts bo = {0};
    st_digest local;
    assert_int_equal(st_build_instance(f->c, ri, &bo, &local, &err), 0);
    assert_memory_equal(&local, &info->images[i].digest, sizeof local);
    st_recipe_instance_free(ri);
  }
  st_cells_free(cells, nc);
  st_recipe_free(r);
  /* the image is tagged in the server's store; the workspace is gone */
  st_digest tagged;
  assert_int_equal(st_tag_get(f->s, "demo", "two", &tagged, &err), 0);
  assert_memory_equal(&tagged, &info->images[1].digest, sizeof tagged);
  assert_int_equal(dir_entries(f->tmp), 0);

  /* a watcher that comes late gets the same history */
  st_bevent *late = NULL;
  size_t nl = 0;
  bool done = false;
  assert_int_equal(st_build_queue_events(q, &id, 0, 0, &late, &nl, &done, &err), 0);
  assert_true(done);
  assert_int_equal(nl, n);
  assert_int_equal(late[n - 1].seq, ev[n - 1].seq);
  st_bevents_free(late, nl);
  /* and one that saw everything gets nothing more, at once */
  assert_int_equal(st_build_queue_events(q, &id, ev[n - 1].seq, -1, &late, &nl, &done, &err), 0);
  assert_int_equal(nl, 0);
  assert_true(done);
  st_bevents_free(ev, n);
  st_build_info_free(info);
  st_build_queue_free(q);
  st_build_request_clear(&req);
}

/* Identical submissions share a build; another cell filter is another build that reuses
 * layers from the first although its context is materialised afresh. */
static void test_dedupe_and_reuse(void **state) {
  struct fx *f = *state;
  simple_tree(f);
  st_build_request one = {0}, all = {0};
  pack(f, "app/r.yaml", "v=one", &one);
  pack(f, "app/r.yaml", NULL, &all);
  upload(f);
  st_build_queue *q = open_queue(f, 1);
  bool existing;
  st_digest a = submit(q, &one, &existing);
  assert_false(existing);
  st_digest b = submit(q, &one, &existing);
  assert_true(existing);
  assert_memory_equal(&a, &b, sizeof a);
  size_t n = 0;
  drain(q, &a);
  st_digest c = submit(q, &one, &existing); /* succeeded: still the same build */
  assert_true(existing);
  assert_memory_equal(&a, &c, sizeof a);
  st_digest d = submit(q, &all, &existing);
  assert_false(existing);
  assert_memory_not_equal(&a, &d, sizeof a);
  st_bevent *ev = wait_done(q, &d, &n);
  /* cell one: both layers cached; cell two: data cached, tool built */
  assert_int_equal(count_layer(ev, n, ST_LAYER_CACHED), 3);
  assert_int_equal(count_layer(ev, n, ST_LAYER_DONE), 1);
  st_bevents_free(ev, n);
  st_build_info **v = NULL;
  size_t nb = 0;
  st_error err = {0};
  assert_int_equal(st_build_queue_list(q, &v, &nb, &err), 0);
  assert_int_equal(nb, 2);
  assert_memory_equal(&v[0]->id, &a, sizeof a);
  assert_string_equal(v[0]->req.cells, "v=one");
  assert_int_equal(v[0]->attempt, 1);
  st_build_infos_free(v, nb);
  size_t counts[ST_BUILD_STATE_COUNT];
  st_build_queue_counts(q, counts);
  assert_int_equal(counts[ST_BUILD_SUCCEEDED], 2);
  st_build_queue_free(q);
  st_build_request_clear(&one);
  st_build_request_clear(&all);
}

static void expect_rejected(st_build_queue *q, const st_build_request *req, int code,
                            const char *msg) {
  st_error err = {0};
  st_digest id;
  assert_int_equal(st_build_queue_submit(q, req, &id, NULL, &err), code);
  if (!strstr(err.msg, msg))
    fail_msg("expected '%s' in '%s'", msg, err.msg);
}

/* Bad requests fail at submit and leave nothing behind. */
static void test_rejected_requests(void **state) {
  struct fx *f = *state;
  st_build_queue *q = open_queue(f, 1);
  char text[256] = "image: x\nlayers:\n  - name: l\n    sources:\n      - file: /etc/hostname\n";
  st_build_request req = {.recipe_name = "sub/r.yaml", .recipe_text = text,
                          .recipe_len = strlen(text)};
  /* a server file named by an absolute path */
  expect_rejected(q, &req, ST_EUNSAFE, "sub/r.yaml:5:9: layer 'l': input '/etc/hostname'");
  /* invalid recipe text names FILE:LINE:COL */
  snprintf(text, sizeof text, "image: x\nlayers:\n  - name: l\n    bogus: 1\n");
  req.recipe_len = strlen(text);
  expect_rejected(q, &req, ST_EFORMAT, "sub/r.yaml:4:5:");
  /* an input the context does not have */
  snprintf(text, sizeof text, "image: x\nlayers:\n  - name: l\n    sources:\n      - file: ./f\n");
  req.recipe_len = strlen(text);
  expect_rejected(q, &req, ST_ENOENT, "sub/r.yaml:5:9:");
  /* a context layer the server does not have */
  req.has_context = true;
  memset(&req.context, 0x5a, sizeof req.context);
  expect_rejected(q, &req, ST_ENOENT, "build context");
  /* a context whose symlink leads out of it */
  st_layer_writer *w = NULL;
  st_error err = {0};
  assert_int_equal(st_layer_writer_new(&w, f->s, 0, &err), 0);
  st_entry e = {.type = ST_ENTRY_SYMLINK, .mode = 0777, .path = strdup("sub/f"),
                .target = strdup("/etc/hostname")};
  assert_int_equal(st_layer_writer_add(w, &e, &err), 0);
  assert_int_equal(st_layer_writer_finish(w, &req.context, NULL, &err), 0);
  st_layer_writer_free(w);
  expect_rejected(q, &req, ST_EUNSAFE, "input 'sub/f' is outside the build context");
  /* malformed requests */
  req.recipe_name = "../r.yaml";
  expect_rejected(q, &req, ST_EINVAL, "recipe name");
  req.recipe_name = "sub/r.yaml";
  req.cells = "nope=1";
  req.has_context = false;
  snprintf(text, sizeof text, "image: x\nlayers:\n  - name: l\n    run: [true]\n");
  req.recipe_len = strlen(text);
  expect_rejected(q, &req, ST_EINVAL, "nope");
  st_build_info **v = NULL;
  size_t nb = 0;
  assert_int_equal(st_build_queue_list(q, &v, &nb, &err), 0);
  assert_int_equal(nb, 0);
  st_build_infos_free(v, nb);
  assert_int_equal(dir_entries(f->tmp), 0);
  st_build_queue_free(q);
}

/* A layer that fails: FAILED with the error, the layer marked failed; a resubmission is a
 * new attempt under the same id. */
static void test_failing_build(void **state) {
  struct fx *f = *state;
  wfile(f, "r.yaml", "image: broken\nlayers:\n  - name: ok\n    sources:\n      - file: ./f\n"
                     "  - name: bad\n    sources:\n      - archive: ./not-an-archive\n");
  wfile(f, "f", "fine\n");
  wfile(f, "not-an-archive", "plain text, not an archive\n");
  st_build_request req = {0};
  pack(f, "r.yaml", NULL, &req);
  upload(f);
  st_build_queue *q = open_queue(f, 1);
  bool existing;
  st_digest id = submit(q, &req, &existing);
  size_t n = 0;
  st_bevent *ev = wait_done(q, &id, &n);
  st_build_info *info = get(q, &id);
  assert_int_equal(info->state, ST_BUILD_FAILED);
  assert_int_equal(info->error_code, ST_EFORMAT);
  assert_true(strstr(info->error, "r.yaml:8:9: layer 'bad'") != NULL);
  assert_int_equal(info->n_images, 0);
  assert_int_equal(count_layer(ev, n, ST_LAYER_FAILED), 1);
  for (size_t i = 0; i < n; i++)
    if (ev[i].kind == ST_BEV_LAYER && ev[i].layer_state == ST_LAYER_FAILED) {
      assert_string_equal(ev[i].layer, "bad");
      assert_int_equal(ev[i].index, 1);
      assert_true(strstr(ev[i].text, "not-an-archive") != NULL);
    }
  assert_string_equal(ev[n - 1].text, info->error);
  uint64_t last = ev[n - 1].seq;
  st_bevents_free(ev, n);
  st_build_info_free(info);
  st_error err = {0};
  st_digest none;
  assert_int_equal(st_tag_get(f->s, "broken", "latest", &none, &err), ST_ENOENT);
  /* resubmitted: attempt 2, numbering goes on */
  st_digest again = submit(q, &req, &existing);
  assert_false(existing);
  assert_memory_equal(&again, &id, sizeof id);
  ev = wait_done(q, &id, &n);
  assert_true(ev[0].seq > last);
  info = get(q, &id);
  assert_int_equal(info->attempt, 2);
  assert_int_equal(info->state, ST_BUILD_FAILED);
  st_bevents_free(ev, n);
  st_build_info_free(info);
  st_build_queue_free(q);
  st_build_request_clear(&req);
}

/* ---- builds with run steps (bubblewrap) ---- */

static bool make_rootfs(struct fx *f) {
  if (access("/usr/bin/bwrap", X_OK) != 0 || geteuid() != 0)
    return false;
  int rc = tu_sh("cd '%s' && mkdir -p rootfs/bin && for b in sh sleep echo; do "
                 "cp -L /bin/$b rootfs/bin/$b && for l in $(ldd /bin/$b | grep -o '/[^ ]*'); do "
                 "mkdir -p rootfs$(dirname $l) && cp -L $l rootfs$l; done; done && "
                 "bwrap --unshare-all --bind rootfs / --proc /proc --dev /dev /bin/sh -c true "
                 ">/dev/null 2>&1",
                 f->work);
  return rc == 0;
}

/* A recipe whose run layer prints `lines` lines, then `marker`, then runs `tail`. */
static void run_recipe(struct fx *f, const char *name, const char *marker, const char *tail) {
  char text[1024];
  snprintf(text, sizeof text,
           "image: %s\nlayers:\n  - name: root\n    sources:\n      - dir: ./rootfs\n"
           "  - name: work\n    run:\n      - \"i=0; while [ $i -lt 50 ]; do echo line $i; "
           "i=$((i+1)); done; echo %s; %s\"\n",
           name, marker, tail);
  char file[128];
  snprintf(file, sizeof file, "%s.yaml", name);
  wfile(f, file, text);
}

static st_digest submit_recipe(struct fx *f, st_build_queue *q, const char *name) {
  char file[128];
  snprintf(file, sizeof file, "%s.yaml", name);
  st_build_request req = {0};
  pack(f, file, NULL, &req);
  upload(f);
  bool existing;
  st_digest id = submit(q, &req, &existing);
  st_build_request_clear(&req);
  return id;
}

static void test_run_logs_and_cancel(void **state) {
  struct fx *f = *state;
  if (!make_rootfs(f))
    skip();
  run_recipe(f, "ok", "finished", "echo bye");
  run_recipe(f, "slow", "started", "sleep 600");
  st_build_queue_opts o = {.workers = 1, .tmpdir = f->tmp, .max_events = 20};
  st_build_queue *q = NULL;
  st_error err = {0};
  assert_int_equal(st_build_queue_open(&q, f->s, &o, &err), 0);
  /* logs reach the history; a bounded one drops old lines first */
  st_digest ok = submit_recipe(f, q, "ok");
  size_t n = 0;
  drain(q, &ok);
  st_bevent *ev = NULL;
  bool done = false;
  assert_int_equal(st_build_queue_events(q, &ok, 0, 0, &ev, &n, &done, &err), 0);
  assert_true(done);
  assert_true(n <= 20);
  assert_int_equal(ev[0].state, ST_BUILD_QUEUED); /* kept: not a log line */
  bool bye = false, line0 = false;
  for (size_t i = 0; i < n; i++) {
    bye |= ev[i].kind == ST_BEV_LOG && !strcmp(ev[i].text, "bye") && !strcmp(ev[i].layer, "work");
    line0 |= ev[i].kind == ST_BEV_LOG && !strcmp(ev[i].text, "line 0");
  }
  assert_true(bye);
  assert_false(line0);
  st_bevents_free(ev, n);

  /* one worker: the second build waits while the first runs */
  st_digest slow = submit_recipe(f, q, "slow");
  wait_log(q, &slow, "started");
  wfile(f, "ok.yaml", "image: ok2\nlayers:\n  - name: root\n    sources:\n      - dir: ./rootfs\n");
  st_digest waiting = submit_recipe(f, q, "ok");
  st_build_info *info = get(q, &waiting);
  assert_int_equal(info->state, ST_BUILD_QUEUED);
  st_build_info_free(info);
  info = get(q, &slow);
  assert_int_equal(info->state, ST_BUILD_RUNNING);
  st_build_info_free(info);
  /* cancelling the running build kills its command */
  st_build_state st;
  assert_int_equal(st_build_queue_cancel(q, &slow, &st, &err), 0);
  assert_int_equal(st, ST_BUILD_RUNNING);
  ev = wait_done(q, &slow, &n);
  assert_int_equal(ev[n - 1].state, ST_BUILD_CANCELLED);
  assert_int_equal(count_layer(ev, n, ST_LAYER_FAILED), 1);
  st_bevents_free(ev, n);
  info = get(q, &slow);
  assert_int_equal(info->state, ST_BUILD_CANCELLED);
  assert_int_equal(info->error_code, ST_ECANCELED);
  st_build_info_free(info);
  /* then the waiting one runs */
  ev = wait_done(q, &waiting, &n);
  assert_int_equal(ev[n - 1].state, ST_BUILD_SUCCEEDED);
  st_bevents_free(ev, n);
  /* cancelling a finished build changes nothing */
  assert_int_equal(st_build_queue_cancel(q, &waiting, &st, &err), 0);
  assert_int_equal(st, ST_BUILD_SUCCEEDED);
  assert_int_equal(st_build_queue_cancel(q, &(st_digest){{1}}, &st, &err), ST_ENOENT);
  st_build_queue_free(q);
  assert_int_equal(dir_entries(f->tmp), 0);
}

static void test_concurrency_and_queued_cancel(void **state) {
  struct fx *f = *state;
  if (!make_rootfs(f))
    skip();
  run_recipe(f, "s1", "started", "sleep 600");
  run_recipe(f, "s2", "started", "sleep 600");
  run_recipe(f, "s3", "started", "sleep 600");
  st_build_queue *q = open_queue(f, 2);
  st_digest a = submit_recipe(f, q, "s1"), b = submit_recipe(f, q, "s2");
  st_digest c = submit_recipe(f, q, "s3");
  /* two workers: two builds run at once, the third waits */
  wait_log(q, &a, "started");
  wait_log(q, &b, "started");
  size_t counts[ST_BUILD_STATE_COUNT];
  st_build_queue_counts(q, counts);
  assert_int_equal(counts[ST_BUILD_RUNNING], 2);
  assert_int_equal(counts[ST_BUILD_QUEUED], 1);
  st_build_state st;
  st_error err = {0};
  assert_int_equal(st_build_queue_cancel(q, &c, &st, &err), 0);
  assert_int_equal(st, ST_BUILD_CANCELLED); /* at once: it never started */
  st_build_info *info = get(q, &c);
  assert_true(info->started == 0);
  assert_true(strstr(info->error, "before it started") != NULL);
  st_build_info_free(info);
  assert_int_equal(st_build_queue_cancel(q, &a, &st, &err), 0);
  assert_int_equal(st_build_queue_cancel(q, &b, &st, &err), 0);
  drain(q, &a);
  drain(q, &b);
  st_build_queue_counts(q, counts);
  assert_int_equal(counts[ST_BUILD_CANCELLED], 3);
  st_build_queue_free(q);
}

/* Stopping the queue puts a running build back in the queue; it runs after the next open.
 * A build recorded RUNNING by a process that died is FAILED at the next open. */
static void test_shutdown_and_restart(void **state) {
  struct fx *f = *state;
  if (!make_rootfs(f))
    skip();
  run_recipe(f, "resume", "started", "test -e /marker || { touch /marker; sleep 600; }");
  st_build_queue *q = open_queue(f, 1);
  st_digest id = submit_recipe(f, q, "resume");
  wait_log(q, &id, "started");
  st_build_queue_free(q); /* kills the command */
  assert_int_equal(dir_entries(f->tmp), 0);
  q = open_queue(f, 1);
  st_build_info *info = get(q, &id);
  assert_true(info->state == ST_BUILD_QUEUED || info->state == ST_BUILD_RUNNING);
  st_build_info_free(info);
  st_build_queue_free(q);
  /* the command is killed again each time: the store's record must say queued */
  char name[160], hex[ST_DIGEST_HEX_LEN + 1];
  snprintf(name, sizeof name, "builds/%s/record", st_digest_hex(&id, hex));
  uint8_t *data = NULL;
  size_t len;
  st_error err = {0};
  assert_int_equal(st_store_meta_get(f->s, name, 65536, &data, &len, &err), 0);
  assert_non_null(strstr((char *)data, "state queued\n"));
  /* as a process that died mid-build leaves it */
  char *p = strstr((char *)data, "state queued\n");
  char *rec = NULL;
  assert_true(asprintf(&rec, "%.*sstate running\n%s", (int)(p - (char *)data), (char *)data,
                       p + strlen("state queued\n")) > 0);
  assert_int_equal(st_store_meta_put(f->s, name, rec, strlen(rec), &err), 0);
  free(rec);
  free(data);
  q = open_queue(f, 1);
  info = get(q, &id);
  assert_int_equal(info->state, ST_BUILD_FAILED);
  assert_string_equal(info->error, "interrupted by server restart");
  st_build_info_free(info);
  st_bevent *ev = NULL;
  size_t n = 0;
  bool done = false;
  assert_int_equal(st_build_queue_events(q, &id, 0, 0, &ev, &n, &done, &err), 0);
  assert_true(done);
  assert_int_equal(ev[n - 1].state, ST_BUILD_FAILED);
  /* the history of the earlier runs was kept */
  bool started = false;
  for (size_t i = 0; i < n; i++)
    started |= ev[i].kind == ST_BEV_LOG && !strcmp(ev[i].text, "started");
  assert_true(started);
  st_bevents_free(ev, n);
  st_build_queue_free(q);
}

/* Records that cannot be read are skipped; the round trip keeps every field. */
static void test_records(void **state) {
  struct fx *f = *state;
  simple_tree(f);
  st_build_request req = {0};
  pack(f, "app/r.yaml", "v=two", &req);
  upload(f);
  st_build_queue *q = open_queue(f, 1);
  st_digest id = submit(q, &req, NULL);
  drain(q, &id);
  st_build_info *before = get(q, &id);
  st_build_queue_free(q);
  st_error err = {0};
  assert_int_equal(st_store_meta_put(f->s, "builds/garbage/record", "junk\n", 5, &err), 0);
  assert_int_equal(st_store_meta_put(f->s, "builds/x/record", "strata-build 1\nstate odd\n",
                                     25, &err), 0);
  q = open_queue(f, 1);
  st_build_info *after = get(q, &id);
  assert_int_equal(after->state, ST_BUILD_SUCCEEDED);
  assert_string_equal(after->req.recipe_name, "app/r.yaml");
  assert_string_equal(after->req.cells, "v=two");
  assert_int_equal(after->req.recipe_len, req.recipe_len);
  assert_memory_equal(after->req.recipe_text, req.recipe_text, req.recipe_len);
  assert_memory_equal(&after->req.context, &req.context, sizeof req.context);
  assert_int_equal(after->n_images, 1);
  assert_string_equal(after->images[0].ref, before->images[0].ref);
  assert_string_equal(after->images[0].cell, "v=two");
  assert_memory_equal(&after->images[0].digest, &before->images[0].digest, sizeof(st_digest));
  assert_true(after->finished - before->finished < 1e-5 && before->finished - after->finished < 1e-5);
  /* the identical request still finds it */
  bool existing = false;
  st_digest again = submit(q, &req, &existing);
  assert_true(existing);
  assert_memory_equal(&again, &id, sizeof id);
  st_build_info **v = NULL;
  size_t nb;
  assert_int_equal(st_build_queue_list(q, &v, &nb, &err), 0);
  assert_int_equal(nb, 1);
  st_build_infos_free(v, nb);
  st_build_info_free(before);
  st_build_info_free(after);
  st_build_queue_free(q);
  st_build_request_clear(&req);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_context_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_context_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_build_matches_local, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dedupe_and_reuse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rejected_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failing_build, setup, teardown),
      cmocka_unit_test_setup_teardown(test_run_logs_and_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrency_and_queued_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shutdown_and_restart, setup, teardown),
      cmocka_unit_test_setup_teardown(test_records, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
