/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer tokens hashed at rest (auth.h): load, check, add. */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "cleanup.h"
#include "digest.h"
#include "fs.h"

#define TOKENS_MAX_BYTES (1u << 20)
#define TOKEN_NAME_MAX 64

struct token {
  char name[TOKEN_NAME_MAX + 1];
  st_role role;
  st_digest hash;
};

struct st_tokens {
  struct token *v;
  size_t n;
};

void st_tokens_free(st_tokens *t) {
  if (!t)
    return;
  free(t->v);
  free(t);
}

static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > TOKEN_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
        !(s[i] >= '0' && s[i] <= '9') && !strchr("._-@", s[i]))
      return false;
  return true;
}

static int parse(st_tokens *t, const char *path, char *text, st_error *err) {
  int line = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    line++;
    while (*l == ' ' || *l == '\t')
      l++;
    if (!*l || *l == '#')
      continue;
    char name[128], role[32], hex[80], extra[2];
    if (sscanf(l, "%127s %31s %79s %1s", name, role, hex, extra) != 3)
      return st_error_set(err, ST_EFORMAT, "%s: line %d: expected NAME ROLE SHA256", path, line);
    if (!name_ok(name))
      return st_error_set(err, ST_EFORMAT, "%s: line %d: bad token name '%s'", path, line, name);
    struct token tok = {0};
    snprintf(tok.name, sizeof tok.name, "%s", name);
    if (st_role_parse(role, &tok.role, err) < 0 || st_digest_parse(&tok.hash, hex, err) < 0)
      return st_error_prefix(err, "%s: line %d", path, line);
    struct token *v = realloc(t->v, (t->n + 1) * sizeof *v);
    if (!v)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    t->v = v;
    t->v[t->n++] = tok;
  }
  return ST_OK;
}

int st_tokens_load(st_tokens **out, const char *path, st_error *err) {
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int r = st_read_file_at(AT_FDCWD, path, TOKENS_MAX_BYTES, &data, &len, err);
  if (r < 0)
    return st_error_prefix(err, "tokens file %s", path);
  st_tokens *t = calloc(1, sizeof *t);
  if (!t)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  r = parse(t, path, (char *)data, err);
  if (r < 0) {
    st_tokens_free(t);
    return r;
  }
  *out = t;
  return ST_OK;
}

int st_tokens_check(const st_tokens *t, const char *token, st_role *role_out,
                    const char **name_out, st_error *err) {
  st_digest h;
  st_sha256(&h, token, strlen(token));
  const struct token *found = NULL;
  for (size_t i = 0; i < t->n; i++)
    if (!CRYPTO_memcmp(h.bytes, t->v[i].hash.bytes, ST_DIGEST_LEN))
      found = &t->v[i];
  if (!found)
    return st_error_set(err, ST_EAUTH, "unknown bearer token");
  *role_out = found->role;
  *name_out = found->name;
  return ST_OK;
}

int st_tokens_add(const char *path, const char *name, st_role role, char **token_out,
                  st_error *err) {
  if (!name_ok(name))
    return st_error_set(err, ST_EINVAL, "bad token name '%s' (letters, digits, ._-@)", name);
  _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return st_error_errno(err, errno, "tokens file %s", path);
  if (flock(fd, LOCK_EX) < 0)
    return st_error_errno(err, errno, "lock %s", path);
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int r = st_read_file_at(AT_FDCWD, path, TOKENS_MAX_BYTES, &data, &len, err);
  if (r < 0)
    return r;
  st_tokens t = {0};
  r = parse(&t, path, (char *)data, err);
  for (size_t i = 0; r == ST_OK && i < t.n; i++)
    if (!strcmp(t.v[i].name, name))
      r = st_error_set(err, ST_EEXIST, "%s: token '%s' exists already", path, name);
  free(t.v);
  if (r < 0)
    return r;
  uint8_t raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    return st_error_set(err, ST_EIO, "no random bytes for a token");
  char *token = malloc(3 + 64 + 1);
  if (!token)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  memcpy(token, "st_", 3);
  for (size_t i = 0; i < sizeof raw; i++)
    snprintf(token + 3 + 2 * i, 3, "%02x", raw[i]);
  st_digest h;
  st_sha256(&h, token, strlen(token));
  char hex[ST_DIGEST_HEX_LEN + 1], line[256];
  int n = snprintf(line, sizeof line, "%s%s %s %s\n", len && data[len - 1] != '\n' ? "\n" : "",
                   name, st_role_name(role), st_digest_hex(&h, hex));
  if (lseek(fd, 0, SEEK_END) < 0 || (r = st_write_all(fd, line, (size_t)n)) < 0 || fsync(fd) < 0) {
    free(token);
    return st_error_errno(err, r < 0 ? -r : errno, "write %s", path);
  }
  *token_out = token;
  return ST_OK;
}
