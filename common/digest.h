/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 digests through OpenSSL EVP (SHA-NI where the CPU has it), and the
 * strict hex form used in paths, the CLI and the API. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define ST_DIGEST_LEN 32
#define ST_DIGEST_HEX_LEN 64

typedef struct {
  uint8_t bytes[ST_DIGEST_LEN];
} st_digest;

/* Streaming hasher; opaque. */
typedef struct st_hasher st_hasher;

/* One-shot SHA-256 of len bytes. Aborts only if OpenSSL cannot provide
 * SHA-256 at all (a broken installation). */
void st_sha256(st_digest *out, const void *data, size_t len);

/* Returns a new hasher (owned; free with st_hasher_free) or NULL on OOM. */
st_hasher *st_hasher_new(void);
void st_hasher_update(st_hasher *h, const void *data, size_t len);
/* Writes the digest and resets the hasher for reuse. */
void st_hasher_final(st_hasher *h, st_digest *out);
void st_hasher_free(st_hasher *h);

/* Lowercase hex, NUL-terminated; out must hold ST_DIGEST_HEX_LEN + 1 bytes.
 * Returns out. */
char *st_digest_hex(const st_digest *d, char *out);

/* Strict parse: exactly 64 lowercase hex digits, optionally preceded by
 * "sha256:". Anything else is ST_EINVAL naming the text. out is written only
 * on success. */
int st_digest_parse(st_digest *out, const char *text, st_error *err);

static inline bool st_digest_equal(const st_digest *a, const st_digest *b) {
  for (int i = 0; i < ST_DIGEST_LEN; i++)
    if (a->bytes[i] != b->bytes[i])
      return false;
  return true;
}
