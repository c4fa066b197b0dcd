/* SPDX-License-Identifier: Apache-2.0 */
/* st_store: hashing, compression, verification and the store config on top
 * of a backend. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "codec.h"
#include "unpack.h"

#define CONFIG_NAME "config"

struct st_store {
  st_backend *backend;
  st_store_config cfg;
  st_codec *codec;
};

st_store_config st_store_config_default(void) {
  return (st_store_config){ST_STORE_FORMAT, st_chunk_params_default(), 3};
}

char *st_store_config_format(const st_store_config *c) {
  char *out = NULL;
  if (asprintf(&out,
               "# strata store configuration; every writer of this store follows it\n"
               "format = %u\nchunk-min = %u\nchunk-avg = %u\nchunk-max = %u\nzstd-level = %d\n",
               c->format, c->chunking.min, c->chunking.avg, c->chunking.max, c->zstd_level) < 0)
    return NULL;
  return out;
}

static int parse_u32(const char *v, uint32_t *out) {
  char *end;
  errno = 0;
  unsigned long x = strtoul(v, &end, 10);
  if (errno || end == v || *end || x > UINT32_MAX || v[0] == '-')
    return -1;
  *out = (uint32_t)x;
  return 0;
}

int st_store_config_parse(st_store_config *out, const char *text, size_t len, st_error *err) {
  st_store_config c = {0};
  bool seen[5] = {false};
  int lineno = 0;
  const char *p = text, *end = text + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
    char line[256];
    lineno++;
    if (ll >= sizeof line)
      return st_error_set(err, ST_EFORMAT, "config line %d: too long", lineno);
    memcpy(line, p, ll);
    line[ll] = '\0';
    p += ll + (nl ? 1 : 0);
    if (line[0] == '#' || line[0] == '\0')
      continue;
    char key[64], val[64];
    if (sscanf(line, "%63[a-z-] = %63s", key, val) != 2)
      return st_error_set(err, ST_EFORMAT, "config line %d: expected 'key = value'", lineno);
    static const char *const keys[] = {"format", "chunk-min", "chunk-avg", "chunk-max",
                                       "zstd-level"};
    int k = -1;
    for (int i = 0; i < 5; i++)
      if (strcmp(key, keys[i]) == 0)
        k = i;
    uint32_t v;
    if (k < 0)
      return st_error_set(err, ST_EFORMAT, "config line %d: unknown key '%s'", lineno, key);
    if (parse_u32(val, &v) < 0)
      return st_error_set(err, ST_EFORMAT, "config line %d: '%s' is not a number", lineno, val);
    seen[k] = true;
    switch (k) {
    case 0: c.format = v; break;
    case 1: c.chunking.min = v; break;
    case 2: c.chunking.avg = v; break;
    case 3: c.chunking.max = v; break;
    default: c.zstd_level = (int)v; break;
    }
  }
  for (int i = 0; i < 5; i++)
    if (!seen[i])
      return st_error_set(err, ST_EFORMAT, "config: missing key %d of 5", i + 1);
  if (c.format != ST_STORE_FORMAT)
    return st_error_set(err, ST_EVERSION, "config: store format %u is not supported (want %u)",
                        c.format, ST_STORE_FORMAT);
  int rc = st_chunk_params_check(&c.chunking, err);
  if (rc < 0)
    return st_error_prefix(err, "config");
  if (c.zstd_level < 1 || c.zstd_level > 19)
    return st_error_set(err, ST_EFORMAT, "config: zstd-level %d is outside 1..19", c.zstd_level);
  *out = c;
  return ST_OK;
}

static int read_config(st_backend *b, st_store_config *cfg, st_error *err) {
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int rc = b->ops->meta_get(b, CONFIG_NAME, 4096, &data, &len, err);
  if (rc < 0)
    return rc;
  return st_store_config_parse(cfg, (const char *)data, len, err);
}

int st_store_init_backend(st_backend *b, const st_store_config *cfg, st_error *err) {
  int rc = st_chunk_params_check(&cfg->chunking, err);
  if (rc < 0)
    return rc;
  st_store_config old;
  st_error tmp = {0};
  rc = read_config(b, &old, &tmp);
  if (rc == ST_OK) {
    if (memcmp(&old, cfg, sizeof old) == 0)
      return ST_OK;
    return st_error_set(err, ST_EEXIST, "store is already initialised with another config");
  }
  if (rc != ST_ENOENT)
    return st_error_set(err, rc, "%s", tmp.msg);
  _cleanup_free_ char *text = st_store_config_format(cfg);
  if (!text)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  return b->ops->meta_put(b, CONFIG_NAME, text, strlen(text), err);
}

int st_store_init(const char *dir, const st_store_config *cfg, st_error *err) {
  st_backend *b = NULL;
  int rc = st_backend_dir_open(&b, dir, 1, err);
  if (rc < 0)
    return rc;
  rc = st_store_init_backend(b, cfg, err);
  st_backend_free(b);
  return rc < 0 ? st_error_prefix(err, "store %s", dir) : ST_OK;
}

int st_store_open_backend(st_store **out, st_backend *b, st_error *err) {
  st_store *s = calloc(1, sizeof *s);
  if (!s) {
    st_backend_free(b);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  s->backend = b;
  int rc = read_config(b, &s->cfg, err);
  if (rc == ST_ENOENT)
    rc = st_error_set(err, ST_ENOENT, "not a strata store (no config; run 'strata store init')");
  if (rc == ST_OK)
    rc = st_codec_new(&s->codec, s->cfg.zstd_level, err);
  if (rc < 0) {
    st_store_free(s);
    return rc;
  }
  *out = s;
  return ST_OK;
}

int st_store_open(st_store **out, const char *dir, unsigned flags, st_error *err) {
  struct stat st;
  if ((flags & ST_STORE_CREATE) && stat(dir, &st) < 0 && errno == ENOENT) {
    /* Initialise aside and rename into place, so a concurrent opener sees
     * either no store or a complete one. */
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.init-%ld", dir, (long)getpid()) >= (int)sizeof tmp)
      return st_error_set(err, ST_EINVAL, "store %s: path too long", dir);
    st_store_config cfg = st_store_config_default();
    int rc = st_store_init(tmp, &cfg, err);
    if (rc == ST_OK && rename(tmp, dir) < 0) {
      if (errno != EEXIST && errno != ENOTEMPTY)
        rc = st_error_errno(err, errno, "store %s", dir);
      st_remove_tree(AT_FDCWD, tmp, NULL); /* lost the race: use theirs */
    }
    if (rc < 0)
      return rc;
  }
  st_backend *b = NULL;
  int rc = st_backend_dir_open(&b, dir, 0, err);
  if (rc < 0)
    return rc;
  rc = st_store_open_backend(out, b, err);
  return rc < 0 ? st_error_prefix(err, "store %s", dir) : ST_OK;
}

void st_store_free(st_store *s) {
  if (!s)
    return;
  st_backend_free(s->backend);
  st_codec_free(s->codec);
  free(s);
}

const st_store_config *st_store_get_config(const st_store *s) { return &s->cfg; }
st_backend *st_store_backend(st_store *s) { return s->backend; }

size_t st_store_max_size(const st_store *s, st_kind k) {
  return k == ST_KIND_CHUNK ? s->cfg.chunking.max : ST_STORE_BLOB_MAX;
}

int st_store_has(st_store *s, st_kind k, const st_digest *d, st_error *err) {
  return s->backend->ops->has(s->backend, k, d, err);
}

int st_store_put_hashed(st_store *s, st_kind k, const st_digest *d, const void *data, size_t len,
                        uint64_t *stored_out, st_error *err) {
  if (stored_out)
    *stored_out = 0;
  if (len > st_store_max_size(s, k))
    return st_error_set(err, ST_ELIMIT, "%s of %zu bytes exceeds the store limit of %zu",
                        st_kind_name(k), len, st_store_max_size(s, k));
  int rc = st_store_has(s, k, d, err);
  if (rc != 0)
    return rc < 0 ? rc : ST_OK;
  _cleanup_free_ uint8_t *frame = NULL;
  size_t flen;
  rc = st_codec_compress(s->codec, data, len, &frame, &flen, err);
  if (rc < 0)
    return rc;
  rc = s->backend->ops->put(s->backend, k, d, frame, flen, err);
  if (rc == ST_OK && stored_out)
    *stored_out = flen;
  return rc;
}

int st_store_put(st_store *s, st_kind k, const void *data, size_t len, st_digest *digest_out,
                 uint64_t *stored_out, st_error *err) {
  st_digest d;
  st_sha256(&d, data, len);
  int rc = st_store_put_hashed(s, k, &d, data, len, stored_out, err);
  if (rc == ST_OK && digest_out)
    *digest_out = d;
  return rc;
}

/* Decompresses a frame and checks it hashes to d. */
static int verify_frame(st_store *s, st_kind k, const st_digest *d, const void *frame,
                        size_t flen, uint8_t **data, size_t *len, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  _cleanup_free_ uint8_t *buf = NULL;
  size_t n;
  int rc = st_codec_decompress(s->codec, frame, flen, st_store_max_size(s, k), &buf, &n, err);
  if (rc == ST_ENOMEM)
    return rc;
  if (rc < 0) {
    char why[512];
    snprintf(why, sizeof why, "%s", err ? err->msg : "damaged frame");
    return st_error_set(err, ST_ECORRUPT, "%s %s: corrupt: %s", st_kind_name(k),
                        st_digest_hex(d, hex), why);
  }
  st_digest got;
  st_sha256(&got, buf, n);
  if (!st_digest_equal(&got, d)) {
    char ghex[ST_DIGEST_HEX_LEN + 1];
    return st_error_set(err, ST_ECORRUPT, "%s %s: corrupt: content hashes to %s", st_kind_name(k),
                        st_digest_hex(d, hex), st_digest_hex(&got, ghex));
  }
  if (data) {
    *data = ST_TAKE_PTR(buf);
    *len = n;
  }
  return ST_OK;
}

int st_store_put_frame(st_store *s, st_kind k, const st_digest *d, const void *frame, size_t flen,
                       st_error *err) {
  int rc = verify_frame(s, k, d, frame, flen, NULL, NULL, err);
  if (rc < 0)
    return rc;
  rc = st_store_has(s, k, d, err);
  if (rc != 0)
    return rc < 0 ? rc : ST_OK;
  return s->backend->ops->put(s->backend, k, d, frame, flen, err);
}

int st_store_get_frame(st_store *s, st_kind k, const st_digest *d, uint8_t **frame, size_t *flen,
                       st_error *err) {
  /* A frame never legitimately exceeds the compress bound of the max size. */
  size_t max = st_store_max_size(s, k);
  max += max / 128 + 1024;
  return s->backend->ops->get(s->backend, k, d, max, frame, flen, err);
}

int st_store_get(st_store *s, st_kind k, const st_digest *d, uint8_t **data, size_t *len,
                 st_error *err) {
  _cleanup_free_ uint8_t *frame = NULL;
  size_t flen;
  int rc = st_store_get_frame(s, k, d, &frame, &flen, err);
  if (rc == ST_ELIMIT) {
    char hex[ST_DIGEST_HEX_LEN + 1];
    return st_error_set(err, ST_ECORRUPT, "%s %s: corrupt: stored object is too large",
                        st_kind_name(k), st_digest_hex(d, hex));
  }
  if (rc < 0)
    return rc;
  return verify_frame(s, k, d, frame, flen, data, len, err);
}

int st_store_del(st_store *s, st_kind k, const st_digest *d, st_error *err) {
  return s->backend->ops->del(s->backend, k, d, err);
}

int st_store_list(st_store *s, st_kind k, st_backend_list_cb cb, void *ud, st_error *err) {
  return s->backend->ops->list(s->backend, k, cb, ud, err);
}

int st_store_flush(st_store *s, st_error *err) { return s->backend->ops->flush(s->backend, err); }

int st_store_meta_get(st_store *s, const char *name, size_t max, uint8_t **data, size_t *len,
                      st_error *err) {
  return s->backend->ops->meta_get(s->backend, name, max, data, len, err);
}

int st_store_meta_put(st_store *s, const char *name, const void *data, size_t len,
                      st_error *err) {
  return s->backend->ops->meta_put(s->backend, name, data, len, err);
}

int st_store_meta_del(st_store *s, const char *name, st_error *err) {
  return s->backend->ops->meta_del(s->backend, name, err);
}

int st_store_meta_list(st_store *s, const char *prefix, int (*cb)(const char *name, void *ud),
                       void *ud, st_error *err) {
  return s->backend->ops->meta_list(s->backend, prefix, cb, ud, err);
}

char *st_store_default_path(void) {
  const char *env = getenv("STRATA_STORE");
  char *out = NULL;
  if (env && *env)
    return strdup(env);
  if (geteuid() == 0)
    return strdup("/var/lib/strata/store");
  const char *xdg = getenv("XDG_DATA_HOME");
  const char *home = getenv("HOME");
  if (xdg && *xdg) {
    if (asprintf(&out, "%s/strata/store", xdg) < 0)
      return NULL;
  } else if (asprintf(&out, "%s/.local/share/strata/store", home && *home ? home : "/tmp") < 0) {
    return NULL;
  }
  return out;
}
