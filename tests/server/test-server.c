/* SPDX-License-Identifier: Apache-2.0 */
/* The gRPC server and client in one process: capabilities, push and pull of
 * an image (only missing chunks move), auth (UNAUTHENTICATED vs
 * PERMISSION_DENIED), bad input (unknown digest, digest mismatch, malformed
 * and oversize messages, unknown methods), a Cas.Write cut off half-way and
 * resumed, and counters. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include "auth.h"
#include "codec.h"
#include "fs.h"
#include "client-private.h"
#include "image.h"
#include "layer-index.h"
#include "layer-writer.h"
#include "rpc.h"
#include "store-check.h"

typedef struct {
  char *dir;
  st_server *srv;
  char target[64];
  char tokens[512];
  char *tok_pull, *tok_push;
  st_store *local;
  st_digest image;
} fixture;

/* A local store with image demo:v1 of one layer: a random file over many
 * chunks, a text file and a directory. */
static const st_transfer_opts two = {.streams = 2}, three = {.streams = 3}, four = {.streams = 4};

typedef struct {
  pthread_mutex_t lock;
  unsigned calls;
  uint64_t max_done, total;
  bool overshoot;
} seen_progress;

static void on_progress(uint64_t done, uint64_t total, void *ud) {
  seen_progress *sp = ud;
  pthread_mutex_lock(&sp->lock);
  sp->calls++;
  if (done > sp->max_done)
    sp->max_done = done;
  sp->overshoot |= done > total;
  sp->total = total;
  pthread_mutex_unlock(&sp->lock);
}

static void make_image(fixture *f, const char *name, uint64_t seed) {
  st_error err = {0};
  char tree[512], store[512];
  snprintf(tree, sizeof tree, "%s/tree-%s", f->dir, name);
  snprintf(store, sizeof store, "%s/local", f->dir);
  size_t n = 600000;
  uint8_t *data = malloc(n);
  tu_random(data, n, seed);
  tu_write(tree, "d/random", data, n);
  tu_write(tree, "d/text", "hello\n", 6);
  free(data);
  if (!f->local)
    assert_int_equal(st_store_open(&f->local, store, ST_STORE_CREATE, &err), 0);
  st_layer_writer *w = NULL;
  assert_int_equal(st_layer_writer_new(&w, f->local, 2, &err), 0);
  st_pack_opts opts = {.owner_root = 1};
  assert_int_equal(st_layer_pack_dir(w, tree, &opts, &err), 0);
  st_digest layer;
  assert_int_equal(st_layer_writer_finish(w, &layer, NULL, &err), 0);
  st_layer_writer_free(w);
  st_image img = {0};
  st_image_layer l = {.digest = layer, .name = (char *)"base", .size = n + 6};
  img.layers = &l;
  img.n_layers = 1;
  assert_int_equal(st_image_save(f->local, &img, &f->image, &err), 0);
  assert_int_equal(st_tag_set(f->local, "demo", name, &f->image, &err), 0);
}

static int start_server(fixture *f, bool tokens) {
  st_error err = {0};
  char store[512];
  snprintf(store, sizeof store, "%s/server", f->dir);
  st_server_config cfg = {.listen = "127.0.0.1:0", .store_path = store, .workers = 4,
                          .grace_seconds = 5, .max_message = 1u << 20};
  if (tokens) {
    snprintf(f->tokens, sizeof f->tokens, "%s/tokens", f->dir);
    assert_int_equal(st_tokens_add(f->tokens, "reader", ST_ROLE_PULL, &f->tok_pull, &err), 0);
    assert_int_equal(st_tokens_add(f->tokens, "ci", ST_ROLE_PUSH, &f->tok_push, &err), 0);
    cfg.tokens_path = f->tokens;
  }
  assert_int_equal(st_server_new(&f->srv, &cfg, &err), 0);
  assert_int_equal(st_server_start(f->srv, &err), 0);
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", st_server_port(f->srv));
  return 0;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp();
  make_image(f, "v1", 1);
  start_server(f, false);
  *state = f;
  return 0;
}

static int setup_auth(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp();
  make_image(f, "v1", 1);
  start_server(f, true);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  st_server_free(f->srv);
  st_store_free(f->local);
  tu_rmtree(f->dir);
  free(f->dir);
  free(f->tok_pull);
  free(f->tok_push);
  free(f);
  return 0;
}

static st_client *client(fixture *f, const char *token) {
  st_client *c = NULL;
  st_client_config cfg = {.target = f->target, .token = token, .deadline_seconds = 60};
  assert_int_equal(st_client_open(&c, &cfg, NULL), 0);
  return c;
}

static st_store *open_store(fixture *f, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", f->dir, name);
  st_store *s = NULL;
  assert_int_equal(st_store_open(&s, path, ST_STORE_CREATE, NULL), 0);
  return s;
}

static void assert_fsck_ok(st_store *s) {
  st_fsck_result res;
  st_error err = {0};
  assert_int_equal(st_store_fsck(s, 2, NULL, NULL, &res, &err), 0);
  assert_int_equal(res.bad, 0);
  assert_int_equal(res.missing, 0);
}

static void test_capabilities(void **state) {
  fixture *f = *state;
  st_client *c = client(f, NULL);
  st_client_caps caps;
  st_error err = {0};
  assert_int_equal(st_client_capabilities(c, &caps, &err), 0);
  assert_int_equal(caps.chunk_avg, st_store_config_default().chunking.avg);
  assert_int_equal(caps.max_message_bytes, 1u << 20);
  assert_false(caps.auth_required);
  st_client_free(c);
}

static void test_push_pull_roundtrip(void **state) {
  fixture *f = *state;
  st_client *c = client(f, NULL);
  st_error err = {0};
  st_transfer_stats stats;
  st_digest d;
  assert_int_equal(st_client_push(c, f->local, "demo:v1", &three, &d, &stats, &err), 0);
  assert_true(st_digest_equal(&d, &f->image));
  assert_true(stats.chunks_total > 3);
  assert_int_equal(stats.chunks_moved, stats.chunks_total);
  assert_int_equal(stats.layers_moved, 1);
  /* again: nothing moves but the manifest */
  assert_int_equal(st_client_push(c, f->local, "demo:v1", &three, &d, &stats, &err), 0);
  assert_int_equal(stats.chunks_moved, 0);
  assert_int_equal(stats.chunks_present, stats.chunks_total);

  st_digest r;
  assert_int_equal(st_client_resolve(c, "demo:v1", &r, &err), 0);
  assert_true(st_digest_equal(&r, &f->image));
  assert_int_equal(st_client_resolve(c, "demo:nope", &r, &err), ST_ENOENT);
  assert_non_null(strstr(err.msg, "demo:nope"));

  st_store *other = open_store(f, "other");
  seen_progress sp = {.lock = PTHREAD_MUTEX_INITIALIZER};
  st_transfer_opts po = {.streams = 4, .progress = on_progress, .progress_ud = &sp};
  assert_int_equal(st_client_pull(c, other, "demo:v1", &po, &d, &stats, &err), 0);
  assert_true(st_digest_equal(&d, &f->image));
  assert_int_equal(stats.chunks_moved, stats.chunks_total);
  /* progress reached the uncompressed size of what moved, never beyond */
  assert_true(sp.calls > 0);
  assert_int_equal(sp.max_done, stats.chunk_bytes_moved);
  assert_int_equal(sp.total, stats.chunk_bytes_moved);
  assert_false(sp.overshoot);
  assert_int_equal(st_tag_get(other, "demo", "v1", &r, &err), 0);
  assert_true(st_digest_equal(&r, &f->image));
  assert_fsck_ok(other);
  /* a second pull finds everything present */
  assert_int_equal(st_client_pull(c, other, "demo:v1", &four, &d, &stats, &err), 0);
  assert_int_equal(stats.chunks_moved, 0);
  assert_int_equal(stats.layers_moved, 0);
  /* a changed image: only the new chunks move */
  make_image(f, "v2", 2);
  assert_int_equal(st_client_push(c, f->local, "demo:v2", &two, &d, &stats, &err), 0);
  uint64_t pushed = stats.chunks_moved;
  assert_true(pushed > 0 && pushed < stats.chunks_total + 1);
  assert_int_equal(st_client_pull(c, other, "demo:v2", &two, &d, &stats, &err), 0);
  assert_int_equal(stats.chunks_moved, pushed);
  assert_fsck_ok(other);
  st_store_free(other);
  st_client_free(c);
}

/* Writes one frame of `content` announced under digest `claimed`. Without
 * finish, the call is canceled once wait_stored says the server has it. */
static int write_one(st_client *c, const st_digest *claimed, const void *content, size_t len,
                     bool finish, bool (*wait_stored)(void *), void *ud, st_error *err) {
  st_codec *codec = NULL;
  assert_int_equal(st_codec_new(&codec, 3, NULL), 0);
  uint8_t *frame;
  size_t flen;
  assert_int_equal(st_codec_compress(codec, content, len, &frame, &flen, NULL), 0);
  st_codec_free(codec);
  Strata__V1__Frame fr = STRATA__V1__FRAME__INIT, *frp = &fr;
  fr.digest = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)claimed->bytes};
  fr.data = (ProtobufCBinaryData){flen, frame};
  Strata__V1__WriteRequest req = STRATA__V1__WRITE_REQUEST__INIT;
  req.n_frames = 1;
  req.frames = &frp;
  cl_call call;
  int r = cl_call_start(&call, c, "/strata.v1.Cas/Write", err);
  if (r == ST_OK)
    r = cl_call_send(&call, &req.base, err);
  if (r == ST_OK && finish) {
    r = cl_call_close_send(&call, err);
    ProtobufCMessage *resp = NULL;
    if (r == ST_OK && cl_call_recv(&call, &strata__v1__write_response__descriptor, &resp, err) == 1)
      protobuf_c_message_free_unpacked(resp, NULL);
  }
  if (!finish)
    for (int i = 0; i < 1000 && !wait_stored(ud); i++)
      usleep(10000);
  r = cl_call_finish(&call, finish ? r : ST_ECANCELED, err);
  free(frame);
  return r;
}

static int has_on_server(fixture *f, const st_digest *d) {
  return st_store_has(st_server_store(f->srv), ST_KIND_CHUNK, d, NULL);
}

struct staged {
  fixture *f;
  const st_digest *d;
};
static bool is_staged(void *ud) {
  struct staged *s = ud;
  return has_on_server(s->f, s->d) == 1;
}

/* Present in the server's store directory as another process would see it
 * (staged, unflushed objects are not). */
static int durable_on_server(fixture *f, const st_digest *d) {
  char path[512];
  snprintf(path, sizeof path, "%s/server", f->dir);
  st_store *s = NULL;
  assert_int_equal(st_store_open(&s, path, 0, NULL), 0);
  int r = st_store_has(s, ST_KIND_CHUNK, d, NULL);
  st_store_free(s);
  return r;
}

static void test_write_verifies_and_resumes(void **state) {
  fixture *f = *state;
  st_client *c = client(f, NULL);
  st_error err = {0};
  const char good[] = "a chunk of content", other[] = "something else";
  st_digest dg, dother;
  st_sha256(&dg, good, sizeof good);
  st_sha256(&dother, other, sizeof other);
  /* mismatch: INVALID_ARGUMENT naming the digest, nothing stored */
  assert_int_equal(write_one(c, &dother, good, sizeof good, true, NULL, NULL, &err), ST_EINVAL);
  char hex[ST_DIGEST_HEX_LEN + 1];
  assert_non_null(strstr(err.msg, st_digest_hex(&dother, hex)));
  assert_int_equal(has_on_server(f, &dother), 0);
  /* a stream cut off after one verified frame: the frame is made durable */
  struct staged st = {f, &dg};
  assert_int_equal(write_one(c, &dg, good, sizeof good, false, is_staged, &st, &err),
                   ST_ECANCELED);
  for (int i = 0; i < 500 && durable_on_server(f, &dg) != 1; i++)
    usleep(10000);
  assert_int_equal(durable_on_server(f, &dg), 1);
  assert_fsck_ok(st_server_store(f->srv));
  /* the retry: already present, acknowledged */
  assert_int_equal(write_one(c, &dg, good, sizeof good, true, NULL, NULL, &err), 0);
  st_client_free(c);
}

static void test_bad_requests(void **state) {
  fixture *f = *state;
  st_client *c = client(f, NULL);
  st_error err = {0};
  /* Read of an unknown digest: NOT_FOUND naming it */
  st_digest unknown;
  st_sha256(&unknown, "nothing", 7);
  ProtobufCBinaryData b = {ST_DIGEST_LEN, unknown.bytes};
  Strata__V1__ReadRequest rreq = STRATA__V1__READ_REQUEST__INIT;
  rreq.n_digests = 1;
  rreq.digests = &b;
  cl_call call;
  assert_int_equal(cl_call_start(&call, c, "/strata.v1.Cas/Read", &err), 0);
  assert_int_equal(cl_call_send(&call, &rreq.base, &err), 0);
  assert_int_equal(cl_call_close_send(&call, &err), 0);
  ProtobufCMessage *m = NULL;
  int r = cl_call_recv(&call, &strata__v1__read_response__descriptor, &m, &err);
  assert_true(r <= 0);
  assert_int_equal(cl_call_finish(&call, r, &err), ST_ENOENT);
  char hex[ST_DIGEST_HEX_LEN + 1];
  assert_non_null(strstr(err.msg, st_digest_hex(&unknown, hex)));
  /* a short digest */
  b.len = 5;
  Strata__V1__FindMissingRequest fm = STRATA__V1__FIND_MISSING_REQUEST__INIT;
  fm.n_digests = 1;
  fm.digests = &b;
  m = NULL;
  assert_int_equal(cl_unary(c, "/strata.v1.Cas/FindMissing", &fm.base,
                            &strata__v1__find_missing_response__descriptor, &m, &err),
                   ST_EINVAL);
  assert_non_null(strstr(err.msg, "digest #0"));
  /* an oversize message (server limit 1 MiB) */
  size_t big = 2u << 20;
  uint8_t *data = calloc(1, big);
  Strata__V1__BlobPiece p = STRATA__V1__BLOB_PIECE__INIT;
  p.kind = STRATA__V1__OBJECT_KIND__OBJECT_KIND_INDEX;
  p.digest = (ProtobufCBinaryData){ST_DIGEST_LEN, unknown.bytes};
  p.total = big;
  p.data = (ProtobufCBinaryData){big, data};
  m = NULL;
  assert_int_equal(cl_unary(c, "/strata.v1.Cas/PutBlob", &p.base,
                            &strata__v1__put_blob_response__descriptor, &m, &err),
                   ST_ELIMIT);
  free(data);
  /* a method nobody registered */
  Strata__V1__GetBuildRequest gb = STRATA__V1__GET_BUILD_REQUEST__INIT;
  gb.build_id = (char *)"x";
  m = NULL;
  assert_int_equal(cl_unary(c, "/strata.v1.Nothing/Here", &gb.base,
                            &strata__v1__build_info__descriptor, &m, &err),
                   ST_EUNSUPPORTED);
  /* bytes that are not the request message */
  Strata__V1__TagRequest tr = STRATA__V1__TAG_REQUEST__INIT;
  tr.name = (char *)"\x01\x02";
  tr.tag = (char *)"t";
  tr.digest = (ProtobufCBinaryData){ST_DIGEST_LEN, f->image.bytes};
  m = NULL;
  r = cl_unary(c, "/strata.v1.Cas/GetBlob", &tr.base, &strata__v1__blob_piece__descriptor, &m,
               &err);
  assert_true(r == ST_EINVAL || r == ST_ENOENT);
  /* the server still answers */
  st_client_caps caps;
  assert_int_equal(st_client_capabilities(c, &caps, &err), 0);
  st_client_free(c);
}

static void test_unreachable(void **state) {
  fixture *f = *state;
  st_client *c = NULL;
  st_client_config cfg = {.target = "127.0.0.1:1", .deadline_seconds = 5};
  st_error err = {0};
  assert_int_equal(st_client_open(&c, &cfg, &err), 0);
  st_client_caps caps;
  int r = st_client_capabilities(c, &caps, &err);
  assert_true(r == ST_EUNAVAIL || r == ST_ETIMEOUT);
  assert_non_null(strstr(err.msg, "127.0.0.1:1"));
  st_client_free(c);
  (void)f;
}

static void test_auth(void **state) {
  fixture *f = *state;
  st_error err = {0};
  st_client_caps caps;
  st_digest d;
  st_client *none = client(f, NULL), *bad = client(f, "st_wrong");
  st_client *reader = client(f, f->tok_pull), *ci = client(f, f->tok_push);
  assert_int_equal(st_client_capabilities(none, &caps, &err), ST_EAUTH);
  assert_non_null(strstr(err.msg, "authentication failed"));
  assert_int_equal(st_client_capabilities(bad, &caps, &err), ST_EAUTH);
  assert_int_equal(st_client_capabilities(reader, &caps, &err), 0);
  assert_true(caps.auth_required);
  /* a read-only token cannot write */
  assert_int_equal(st_client_push(reader, f->local, "demo:v1", &two, &d, NULL, &err), ST_EPERM);
  assert_non_null(strstr(err.msg, "reader"));
  assert_int_equal(st_client_push(ci, f->local, "demo:v1", &two, &d, NULL, &err), 0);
  st_store *other = open_store(f, "other");
  assert_int_equal(st_client_pull(none, other, "demo:v1", &two, &d, NULL, &err), ST_EAUTH);
  assert_int_equal(st_client_pull(reader, other, "demo:v1", &two, &d, NULL, &err), 0);
  assert_fsck_ok(other);
  st_store_free(other);
  st_client_free(none);
  st_client_free(bad);
  st_client_free(reader);
  st_client_free(ci);
}

static void test_tokens_file(void **state) {
  char *dir = tu_mkdtemp();
  char path[512];
  snprintf(path, sizeof path, "%s/tokens", dir);
  st_error err = {0};
  char *tok = NULL;
  assert_int_equal(st_tokens_add(path, "a", ST_ROLE_BUILD, &tok, &err), 0);
  char *again = NULL;
  assert_int_equal(st_tokens_add(path, "a", ST_ROLE_PULL, &again, &err), ST_EEXIST);
  st_tokens *t = NULL;
  assert_int_equal(st_tokens_load(&t, path, &err), 0);
  st_role role;
  const char *name;
  assert_int_equal(st_tokens_check(t, tok, &role, &name, &err), 0);
  assert_int_equal(role, ST_ROLE_BUILD);
  assert_string_equal(name, "a");
  assert_int_equal(st_tokens_check(t, "st_other", &role, &name, &err), ST_EAUTH);
  st_tokens_free(t);
  /* the token itself is not in the file */
  uint8_t *data;
  size_t len;
  assert_int_equal(st_read_file_at(AT_FDCWD, path, 4096, &data, &len, &err), 0);
  assert_null(strstr((char *)data, tok));
  free(data);
  tu_write(dir, "bad", "x pull nothex\n", 14);
  snprintf(path, sizeof path, "%s/bad", dir);
  assert_int_equal(st_tokens_load(&t, path, &err), ST_EINVAL);
  assert_non_null(strstr(err.msg, "line 1"));
  free(tok);
  tu_rmtree(dir);
  free(dir);
}

static void test_status(void **state) {
  fixture *f = *state;
  st_client *c = client(f, NULL);
  st_error err = {0};
  assert_int_equal(st_client_push(c, f->local, "demo:v1", &two, NULL, NULL, &err), 0);
  Strata__V1__StatusRequest req = STRATA__V1__STATUS_REQUEST__INIT;
  Strata__V1__StatusResponse *resp = NULL;
  assert_int_equal(cl_unary(c, "/strata.v1.Status/Get", &req.base,
                            &strata__v1__status_response__descriptor, (ProtobufCMessage **)&resp,
                            &err),
                   0);
  assert_non_null(strstr(resp->text, "chunks_received "));
  uint64_t calls = 0;
  for (size_t i = 0; i < resp->n_metrics; i++)
    if (!strcmp(resp->metrics[i]->name, "calls"))
      calls = resp->metrics[i]->value;
  assert_true(calls >= 3);
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  st_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_capabilities, setup, teardown),
      cmocka_unit_test_setup_teardown(test_push_pull_roundtrip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_write_verifies_and_resumes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unreachable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_auth, setup_auth, teardown),
      cmocka_unit_test_setup_teardown(test_status, setup, teardown),
      cmocka_unit_test(test_tokens_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
