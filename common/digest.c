/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 through OpenSSL EVP; the MD is fetched once per process. */
#include "digest.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct st_hasher {
  EVP_MD_CTX *ctx;
};

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void) {
  sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
  if (!sha256_md) {
    fprintf(stderr, "strata: OpenSSL provides no SHA-256\n");
    abort();
  }
}

static const EVP_MD *md(void) {
  pthread_once(&sha256_once, sha256_fetch);
  return sha256_md;
}

/* Release the fetched MD at exit so leak checkers see a clean process. */
__attribute__((destructor)) static void sha256_release(void) {
  if (sha256_md)
    EVP_MD_free(sha256_md);
  sha256_md = NULL;
}

void st_sha256(st_digest *out, const void *data, size_t len) {
  unsigned int n = 0;
  if (!EVP_Digest(data, len, out->bytes, &n, md(), NULL) || n != ST_DIGEST_LEN)
    abort();
}

st_hasher *st_hasher_new(void) {
  st_hasher *h = calloc(1, sizeof *h);
  if (!h)
    return NULL;
  h->ctx = EVP_MD_CTX_new();
  if (!h->ctx || !EVP_DigestInit_ex(h->ctx, md(), NULL)) {
    st_hasher_free(h);
    return NULL;
  }
  return h;
}

void st_hasher_update(st_hasher *h, const void *data, size_t len) {
  if (len && !EVP_DigestUpdate(h->ctx, data, len))
    abort();
}

void st_hasher_final(st_hasher *h, st_digest *out) {
  unsigned int n = 0;
  if (!EVP_DigestFinal_ex(h->ctx, out->bytes, &n) || n != ST_DIGEST_LEN)
    abort();
  if (!EVP_DigestInit_ex(h->ctx, md(), NULL))
    abort();
}

void st_hasher_free(st_hasher *h) {
  if (!h)
    return;
  EVP_MD_CTX_free(h->ctx);
  free(h);
}

char *st_digest_hex(const st_digest *d, char *out) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < ST_DIGEST_LEN; i++) {
    out[2 * i] = hex[d->bytes[i] >> 4];
    out[2 * i + 1] = hex[d->bytes[i] & 0xf];
  }
  out[ST_DIGEST_HEX_LEN] = '\0';
  return out;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

int st_digest_parse(st_digest *out, const char *text, st_error *err) {
  if (!text)
    return st_error_set(err, ST_EINVAL, "missing digest");
  const char *p = text;
  if (strncmp(p, "sha256:", 7) == 0)
    p += 7;
  st_digest d;
  size_t len = strlen(p);
  if (len != ST_DIGEST_HEX_LEN)
    return st_error_set(err, ST_EINVAL, "invalid digest '%.80s': want 64 lowercase hex digits",
                        text);
  for (int i = 0; i < ST_DIGEST_LEN; i++) {
    int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return st_error_set(err, ST_EINVAL, "invalid digest '%.80s': want 64 lowercase hex digits",
                          text);
    d.bytes[i] = (uint8_t)(hi << 4 | lo);
  }
  *out = d;
  return ST_OK;
}
