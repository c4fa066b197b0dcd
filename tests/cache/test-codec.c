/* SPDX-License-Identifier: Apache-2.0 */
/* zstd codec: round trip, recorded size, bounded and strict decoding. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "codec.h"

static void test_roundtrip_and_errors(void **state) {
  st_codec *c = NULL;
  st_error err = {0};
  assert_int_equal(st_codec_new(&c, 0, &err), ST_EINVAL);
  assert_int_equal(st_codec_new(&c, 3, &err), 0);
  size_t len = 200000;
  uint8_t *src = malloc(len);
  tu_random(src, len / 2, 5);
  memset(src + len / 2, 'a', len / 2);
  uint8_t *frame = NULL, *out = NULL;
  size_t flen, olen;
  assert_int_equal(st_codec_compress(c, src, len, &frame, &flen, &err), 0);
  assert_true(flen < len);
  uint64_t sz;
  assert_int_equal(st_codec_frame_size(frame, flen, &sz, &err), 0);
  assert_int_equal(sz, len);
  assert_int_equal(st_codec_decompress(c, frame, flen, len, &out, &olen, &err), 0);
  assert_int_equal(olen, len);
  assert_memory_equal(out, src, len);
  free(out);
  /* over the caller's limit */
  assert_int_equal(st_codec_decompress(c, frame, flen, len - 1, &out, &olen, &err), ST_ELIMIT);
  /* truncated */
  assert_int_equal(st_codec_decompress(c, frame, flen - 10, len, &out, &olen, &err), ST_ECORRUPT);
  assert_int_equal(st_codec_decompress(c, frame, 3, len, &out, &olen, &err), ST_ECORRUPT);
  /* trailing garbage */
  uint8_t *longer = malloc(flen + 4);
  memcpy(longer, frame, flen);
  memcpy(longer + flen, "junk", 4);
  assert_int_equal(st_codec_decompress(c, longer, flen + 4, len, &out, &olen, &err), ST_ECORRUPT);
  /* a flipped byte in the compressed payload is caught by zstd or by size */
  frame[flen / 2] ^= 0xff;
  int rc = st_codec_decompress(c, frame, flen, len, &out, &olen, &err);
  if (rc == 0) {
    assert_memory_not_equal(out, src, len); /* then the SHA-256 check catches it */
    free(out);
  } else {
    assert_int_equal(rc, ST_ECORRUPT);
  }
  /* empty input */
  free(frame);
  assert_int_equal(st_codec_compress(c, "", 0, &frame, &flen, &err), 0);
  assert_int_equal(st_codec_decompress(c, frame, flen, 10, &out, &olen, &err), 0);
  assert_int_equal(olen, 0);
  free(out);
  free(frame);
  free(longer);
  free(src);
  st_codec_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_roundtrip_and_errors)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
