/* SPDX-License-Identifier: Apache-2.0 */
/* FastCDC: boundaries independent of buffer sizes, within bounds, stable
 * under insertions and deletions, and pinned (the gear table is format). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "chunker.h"
#include "digest.h"

#define DATA_LEN (8u << 20)

/* Cuts data feeding it `step` bytes at a time; returns the number of chunks
 * and writes each chunk's end offset into ends. */
static size_t cut_all(const st_chunk_params *p, const uint8_t *data, size_t len, size_t step,
                      size_t *ends, size_t max_ends) {
  st_chunker c;
  st_chunker_init(&c, p);
  size_t n = 0, off = 0, pos = 0;
  while (off < len) {
    size_t avail = len - off < step ? len - off : step;
    size_t k = st_chunker_scan(&c, data + off, avail);
    if (k) {
      pos = off + k;
      assert_true(n < max_ends);
      ends[n++] = pos;
      off += k;
    } else {
      off += avail;
    }
  }
  if (pos < len) {
    assert_true(n < max_ends);
    ends[n++] = len;
  }
  return n;
}

static uint8_t *random_data(size_t len, uint64_t seed) {
  uint8_t *d = malloc(len);
  assert_non_null(d);
  tu_random(d, len, seed);
  return d;
}

static void test_buffer_size_independent(void **state) {
  st_chunk_params p = st_chunk_params_default();
  size_t len = 2u << 20;
  uint8_t *data = random_data(len, 1);
  size_t *ref = calloc(4096, sizeof *ref), *got = calloc(4096, sizeof *got);
  size_t nref = cut_all(&p, data, len, len, ref, 4096);
  const size_t steps[] = {1, 7, 63, 4096, 16384, 65536, 65537, 1u << 20};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    size_t n = cut_all(&p, data, len, steps[i], got, 4096);
    assert_int_equal(n, nref);
    assert_memory_equal(got, ref, n * sizeof *got);
  }
  free(ref);
  free(got);
  free(data);
}

static void test_sizes_within_bounds(void **state) {
  const st_chunk_params params[] = {
      st_chunk_params_default(),
      {4096, 8192, 32768},
      {64, 256, 1024},
  };
  uint8_t *data = random_data(DATA_LEN, 2);
  size_t *ends = calloc(200000, sizeof *ends);
  for (size_t t = 0; t < 3; t++) {
    const st_chunk_params *p = &params[t];
    size_t len = p->avg >= 65536 ? DATA_LEN : DATA_LEN / 8;
    size_t n = cut_all(p, data, len, 100000, ends, 200000);
    size_t prev = 0;
    for (size_t i = 0; i < n; i++) {
      size_t sz = ends[i] - prev;
      assert_true(sz <= p->max);
      if (i + 1 < n)
        assert_true(sz >= p->min);
      prev = ends[i];
    }
    double mean = (double)len / (double)n;
    /* normalised chunking keeps the mean near the target average */
    assert_true(mean > p->avg * 0.6 && mean < p->avg * 1.6);
  }
  /* Data without content-defined boundaries is cut at max. */
  memset(data, 0, DATA_LEN);
  st_chunk_params p = st_chunk_params_default();
  size_t n = cut_all(&p, data, 1u << 20, 1u << 20, ends, 200000);
  assert_int_equal(n, 4);
  assert_int_equal(ends[0], p.max);
  free(ends);
  free(data);
}

/* Digests of the chunks of data, for comparing two versions. */
static size_t chunk_digests(const uint8_t *data, size_t len, st_digest *out, size_t max) {
  st_chunk_params p = st_chunk_params_default();
  size_t *ends = calloc(max, sizeof *ends);
  size_t n = cut_all(&p, data, len, 1u << 16, ends, max);
  size_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    st_sha256(&out[i], data + prev, ends[i] - prev);
    prev = ends[i];
  }
  free(ends);
  return n;
}

static size_t shared(const st_digest *a, size_t na, const st_digest *b, size_t nb) {
  size_t s = 0;
  for (size_t i = 0; i < nb; i++)
    for (size_t j = 0; j < na; j++)
      if (st_digest_equal(&b[i], &a[j])) {
        s++;
        break;
      }
  return s;
}

static void test_stable_under_insert_and_delete(void **state) {
  size_t len = 4u << 20;
  uint8_t *v1 = random_data(len, 3);
  uint8_t *v2 = malloc(len + 100);
  /* insert 100 bytes at 1 MiB */
  memcpy(v2, v1, 1u << 20);
  tu_random(v2 + (1u << 20), 100, 99);
  memcpy(v2 + (1u << 20) + 100, v1 + (1u << 20), len - (1u << 20));
  st_digest *a = calloc(1024, sizeof *a), *b = calloc(1024, sizeof *b);
  size_t na = chunk_digests(v1, len, a, 1024);
  size_t nb = chunk_digests(v2, len + 100, b, 1024);
  /* only the chunk(s) around the edit change */
  assert_true(shared(a, na, b, nb) >= nb - 2);
  /* delete 1000 bytes at 2 MiB */
  memcpy(v2, v1, 2u << 20);
  memcpy(v2 + (2u << 20), v1 + (2u << 20) + 1000, len - (2u << 20) - 1000);
  nb = chunk_digests(v2, len - 1000, b, 1024);
  assert_true(shared(a, na, b, nb) >= nb - 2);
  free(a);
  free(b);
  free(v1);
  free(v2);
}

static void test_pinned_boundaries(void **state) {
  /* The gear table and masks are part of the store format: these offsets
   * must never change, or existing stores stop deduplicating. */
  st_chunk_params p = st_chunk_params_default();
  uint8_t *data = random_data(1u << 20, 42);
  size_t ends[64];
  size_t n = cut_all(&p, data, 1u << 20, 1u << 20, ends, 64);
  assert_int_equal(n, 15);
  assert_int_equal(ends[0], 39680);
  assert_int_equal(ends[1], 131201);
  assert_int_equal(ends[2], 217224);
  free(data);
}

static void test_params_check(void **state) {
  st_error err = {0};
  st_chunk_params ok = st_chunk_params_default();
  assert_int_equal(st_chunk_params_check(&ok, &err), 0);
  const st_chunk_params bad[] = {
      {16, 64, 256},           /* min below limit */
      {1024, 3000, 8192},      /* avg not a power of two */
      {8192, 4096, 65536},     /* min > avg */
      {1024, 4096, 4096},      /* avg == max */
      {1024, 4096, 64u << 20}, /* max above limit */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(st_chunk_params_check(&bad[i], &err), ST_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffer_size_independent),
      cmocka_unit_test(test_sizes_within_bounds),
      cmocka_unit_test(test_stable_under_insert_and_delete),
      cmocka_unit_test(test_pinned_boundaries),
      cmocka_unit_test(test_params_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
