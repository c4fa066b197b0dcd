/* SPDX-License-Identifier: Apache-2.0 */
/* st_store over the memory backend: config, put/get, verification. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "store.h"

static st_store *mem_store(st_backend **backend_out) {
  st_backend *b = NULL;
  st_error err = {0};
  assert_int_equal(st_backend_mem_new(&b, &err), 0);
  st_store_config cfg = st_store_config_default();
  assert_int_equal(st_store_init_backend(b, &cfg, &err), 0);
  assert_int_equal(st_store_init_backend(b, &cfg, &err), 0); /* same config: no-op */
  cfg.zstd_level = 5;
  assert_int_equal(st_store_init_backend(b, &cfg, &err), ST_EEXIST);
  st_store *s = NULL;
  assert_int_equal(st_store_open_backend(&s, b, &err), 0);
  if (backend_out)
    *backend_out = b;
  return s;
}

static void test_config_parse(void **state) {
  st_store_config c, d = st_store_config_default();
  st_error err = {0};
  char *text = st_store_config_format(&d);
  assert_int_equal(st_store_config_parse(&c, text, strlen(text), &err), 0);
  assert_memory_equal(&c, &d, sizeof c);
  free(text);
  const char *v2 = "format = 2\nchunk-min = 16384\nchunk-avg = 65536\nchunk-max = 262144\n"
                   "zstd-level = 3\n";
  assert_int_equal(st_store_config_parse(&c, v2, strlen(v2), &err), ST_EVERSION);
  const char *bad[] = {
      "format = 1\n",
      "format = 1\nchunk-min = 16384\nchunk-avg = 65536\nchunk-max = 262144\nzstd-level = x\n",
      "format = 1\nchunk-min = 16384\nchunk-avg = 65535\nchunk-max = 262144\nzstd-level = 3\n",
      "format = 1\nchunk-min = 16384\nchunk-avg = 65536\nchunk-max = 262144\nzstd-level = 30\n",
      "format = 1\nbogus = 1\n",
      "garbage",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = st_store_config_parse(&c, bad[i], strlen(bad[i]), &err);
    assert_true(rc == ST_EFORMAT || rc == ST_EINVAL);
    assert_true(strlen(err.msg) > 0);
  }
}

static void test_put_get_idempotent(void **state) {
  st_backend *b;
  st_store *s = mem_store(&b);
  st_error err = {0};
  uint8_t data[5000];
  tu_random(data, sizeof data, 1);
  st_digest d, d2;
  uint64_t stored = 0;
  assert_int_equal(st_store_put(s, ST_KIND_CHUNK, data, sizeof data, &d, &stored, &err), 0);
  assert_true(stored > 0);
  st_digest want;
  st_sha256(&want, data, sizeof data);
  assert_true(st_digest_equal(&d, &want));
  unsigned long puts = st_backend_mem_counters(b).puts;
  assert_int_equal(st_store_put(s, ST_KIND_CHUNK, data, sizeof data, &d2, &stored, &err), 0);
  assert_int_equal(stored, 0);                                  /* already present */
  assert_int_equal(st_backend_mem_counters(b).puts, puts);      /* nothing written */
  assert_int_equal(st_store_has(s, ST_KIND_CHUNK, &d, &err), 1);
  assert_int_equal(st_store_has(s, ST_KIND_INDEX, &d, &err), 0); /* kinds are separate */
  uint8_t *out = NULL;
  size_t len;
  assert_int_equal(st_store_get(s, ST_KIND_CHUNK, &d, &out, &len, &err), 0);
  assert_int_equal(len, sizeof data);
  assert_memory_equal(out, data, len);
  free(out);
  st_digest missing = d;
  missing.bytes[0] ^= 1;
  assert_int_equal(st_store_get(s, ST_KIND_CHUNK, &missing, &out, &len, &err), ST_ENOENT);
  /* chunks larger than the configured max are refused */
  uint8_t *big = calloc(1, 300000);
  assert_int_equal(st_store_put(s, ST_KIND_CHUNK, big, 300000, &d2, NULL, &err), ST_ELIMIT);
  assert_int_equal(st_store_put(s, ST_KIND_INDEX, big, 300000, &d2, NULL, &err), 0);
  free(big);
  st_store_free(s);
}

static void test_corruption_is_named(void **state) {
  st_backend *b;
  st_store *s = mem_store(&b);
  st_error err = {0};
  uint8_t data[3000];
  tu_random(data, sizeof data, 2);
  st_digest d, other;
  assert_int_equal(st_store_put(s, ST_KIND_CHUNK, data, sizeof data, &d, NULL, &err), 0);
  /* store the frame of other bytes under d: content does not hash to d */
  uint8_t *frame = NULL;
  size_t flen;
  st_codec *c;
  assert_int_equal(st_codec_new(&c, 3, &err), 0);
  data[0] ^= 1;
  assert_int_equal(st_codec_compress(c, data, sizeof data, &frame, &flen, &err), 0);
  st_sha256(&other, data, sizeof data);
  assert_int_equal(b->ops->del(b, ST_KIND_CHUNK, &d, &err), 0);
  assert_int_equal(b->ops->put(b, ST_KIND_CHUNK, &d, frame, flen, &err), 0);
  uint8_t *out = NULL;
  size_t len;
  char hex[65];
  assert_int_equal(st_store_get(s, ST_KIND_CHUNK, &d, &out, &len, &err), ST_ECORRUPT);
  assert_non_null(strstr(err.msg, st_digest_hex(&d, hex)));
  assert_non_null(strstr(err.msg, "corrupt"));
  /* a truncated frame */
  assert_int_equal(b->ops->del(b, ST_KIND_CHUNK, &d, &err), 0);
  assert_int_equal(b->ops->put(b, ST_KIND_CHUNK, &d, frame, flen / 2, &err), 0);
  assert_int_equal(st_store_get(s, ST_KIND_CHUNK, &d, &out, &len, &err), ST_ECORRUPT);
  assert_non_null(strstr(err.msg, hex));
  /* put_frame verifies before storing */
  assert_int_equal(st_store_put_frame(s, ST_KIND_CHUNK, &d, frame, flen, &err), ST_ECORRUPT);
  assert_int_equal(st_store_put_frame(s, ST_KIND_CHUNK, &other, frame, flen, &err), 0);
  assert_int_equal(st_store_has(s, ST_KIND_CHUNK, &other, &err), 1);
  free(frame);
  st_codec_free(c);
  st_store_free(s);
}

static void test_open_without_config(void **state) {
  st_backend *b = NULL;
  st_store *s = NULL;
  st_error err = {0};
  assert_int_equal(st_backend_mem_new(&b, &err), 0);
  assert_int_equal(st_store_open_backend(&s, b, &err), ST_ENOENT); /* b consumed */
  assert_null(s);
  assert_non_null(strstr(err.msg, "not a strata store"));
  setenv("STRATA_STORE", "/x/y", 1);
  char *p = st_store_default_path();
  assert_string_equal(p, "/x/y");
  free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_parse),
      cmocka_unit_test(test_put_get_idempotent),
      cmocka_unit_test(test_corruption_is_named),
      cmocka_unit_test(test_open_without_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
