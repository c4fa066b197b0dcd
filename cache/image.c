/* SPDX-License-Identifier: Apache-2.0 */
/* Image manifests (strata.v1.ImageManifest via protobuf-c), tags and build
 * cache keys. Tags live at tags/<name>/:<tag> (':' cannot occur in a name
 * component, so names with '/' stay unambiguous); keys at keys/<ab>/<hex>.
 * Both hold "sha256:<hex>\n" and are replaced atomically. */
#include "image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format.pb-c.h"

void st_image_free(st_image *img) {
  if (!img)
    return;
  for (size_t i = 0; i < img->n_layers; i++)
    free(img->layers[i].name);
  free(img->layers);
  for (size_t i = 0; i < img->n_env; i++) {
    free(img->env[i].key);
    free(img->env[i].value);
  }
  free(img->env);
  for (size_t i = 0; i < img->n_labels; i++) {
    free(img->labels[i].key);
    free(img->labels[i].value);
  }
  free(img->labels);
  for (size_t i = 0; i < img->n_entrypoint; i++)
    free(img->entrypoint[i]);
  free(img->entrypoint);
  free(img->workdir);
  free(img);
}

static int kv_cmp(const void *a, const void *b) {
  return strcmp(((const st_kv *)a)->key, ((const st_kv *)b)->key);
}

static int kv_sort(st_kv *kv, size_t n, const char *what, st_error *err) {
  if (n > 1)
    qsort(kv, n, sizeof *kv, kv_cmp);
  for (size_t i = 1; i < n; i++)
    if (strcmp(kv[i - 1].key, kv[i].key) == 0)
      return st_error_set(err, ST_EINVAL, "image %s: key '%s' given twice", what, kv[i].key);
  return ST_OK;
}

const char *st_kv_get(const st_kv *kv, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(kv[i].key, key) == 0)
      return kv[i].value;
  return NULL;
}

int st_image_normalize(st_image *img, st_error *err) {
  int rc = kv_sort(img->env, img->n_env, "env", err);
  return rc < 0 ? rc : kv_sort(img->labels, img->n_labels, "labels", err);
}

static Strata__V1__KeyValue **kv_pack(const st_kv *kv, size_t n, Strata__V1__KeyValue *store) {
  Strata__V1__KeyValue **ptrs = calloc(n + 1, sizeof *ptrs);
  if (!ptrs)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    strata__v1__key_value__init(&store[i]);
    store[i].key = kv[i].key;
    store[i].value = kv[i].value;
    ptrs[i] = &store[i];
  }
  return ptrs;
}

int st_image_encode(const st_image *img, uint8_t **out, size_t *len, st_error *err) {
  for (size_t i = 1; i < img->n_env; i++)
    if (strcmp(img->env[i - 1].key, img->env[i].key) >= 0)
      return st_error_set(err, ST_EINVAL, "image env is not sorted");
  for (size_t i = 1; i < img->n_labels; i++)
    if (strcmp(img->labels[i - 1].key, img->labels[i].key) >= 0)
      return st_error_set(err, ST_EINVAL, "image labels are not sorted");
  Strata__V1__ImageLayer *layers = calloc(img->n_layers + 1, sizeof *layers);
  Strata__V1__ImageLayer **lp = calloc(img->n_layers + 1, sizeof *lp);
  Strata__V1__KeyValue *env = calloc(img->n_env + 1, sizeof *env);
  Strata__V1__KeyValue *labels = calloc(img->n_labels + 1, sizeof *labels);
  Strata__V1__KeyValue **envp = env ? kv_pack(img->env, img->n_env, env) : NULL;
  Strata__V1__KeyValue **labelp = labels ? kv_pack(img->labels, img->n_labels, labels) : NULL;
  int rc = ST_OK;
  if (!layers || !lp || !envp || !labelp) {
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < img->n_layers; i++) {
    strata__v1__image_layer__init(&layers[i]);
    layers[i].digest = (ProtobufCBinaryData){ST_DIGEST_LEN, (uint8_t *)img->layers[i].digest.bytes};
    layers[i].name = img->layers[i].name ? img->layers[i].name : (char *)"";
    layers[i].size = img->layers[i].size;
    lp[i] = &layers[i];
  }
  Strata__V1__ImageConfig cfg = STRATA__V1__IMAGE_CONFIG__INIT;
  cfg.n_env = img->n_env;
  cfg.env = envp;
  cfg.workdir = img->workdir ? img->workdir : (char *)"";
  cfg.n_entrypoint = img->n_entrypoint;
  cfg.entrypoint = img->entrypoint;
  cfg.n_labels = img->n_labels;
  cfg.labels = labelp;
  Strata__V1__ImageManifest m = STRATA__V1__IMAGE_MANIFEST__INIT;
  m.version = ST_IMAGE_VERSION;
  m.n_layers = img->n_layers;
  m.layers = lp;
  m.config = &cfg;
  size_t sz = strata__v1__image_manifest__get_packed_size(&m);
  uint8_t *buf = malloc(sz ? sz : 1);
  if (!buf) {
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  *len = strata__v1__image_manifest__pack(&m, buf);
  *out = buf;
out:
  free(layers);
  free(lp);
  free(env);
  free(labels);
  free(envp);
  free(labelp);
  return rc;
}

static int kv_copy(st_kv **out, size_t *n_out, Strata__V1__KeyValue **in, size_t n) {
  *out = calloc(n + 1, sizeof **out);
  if (!*out)
    return ST_ENOMEM;
  for (size_t i = 0; i < n; i++, (*n_out)++) {
    (*out)[i].key = strdup(in[i]->key);
    (*out)[i].value = strdup(in[i]->value);
    if (!(*out)[i].key || !(*out)[i].value) {
      (*n_out)++;
      return ST_ENOMEM;
    }
  }
  return ST_OK;
}

int st_image_decode(st_image **out, const uint8_t *data, size_t len, st_error *err) {
  Strata__V1__ImageManifest *m = strata__v1__image_manifest__unpack(NULL, len, data);
  if (!m)
    return st_error_set(err, ST_EFORMAT, "image manifest: malformed or truncated message");
  int rc = ST_OK;
  st_image *img = calloc(1, sizeof *img);
  if (!img) {
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  if (m->version != ST_IMAGE_VERSION) {
    rc = st_error_set(err, ST_EVERSION, "image manifest: version %u is not supported",
                      m->version);
    goto out;
  }
  img->layers = calloc(m->n_layers + 1, sizeof *img->layers);
  if (!img->layers) {
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < m->n_layers; i++, img->n_layers++) {
    if (m->layers[i]->digest.len != ST_DIGEST_LEN) {
      rc = st_error_set(err, ST_EFORMAT, "image manifest: layer %zu has a bad digest", i);
      goto out;
    }
    memcpy(img->layers[i].digest.bytes, m->layers[i]->digest.data, ST_DIGEST_LEN);
    img->layers[i].size = m->layers[i]->size;
    if (!(img->layers[i].name = strdup(m->layers[i]->name))) {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
      goto out;
    }
  }
  const Strata__V1__ImageConfig *c = m->config;
  if (c) {
    if (kv_copy(&img->env, &img->n_env, c->env, c->n_env) < 0 ||
        kv_copy(&img->labels, &img->n_labels, c->labels, c->n_labels) < 0 ||
        (c->workdir[0] && !(img->workdir = strdup(c->workdir))) ||
        !(img->entrypoint = calloc(c->n_entrypoint + 1, sizeof *img->entrypoint))) {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
      goto out;
    }
    for (size_t i = 0; i < c->n_entrypoint; i++, img->n_entrypoint++)
      if (!(img->entrypoint[i] = strdup(c->entrypoint[i]))) {
        rc = st_error_set(err, ST_ENOMEM, "out of memory");
        goto out;
      }
  }
out:
  strata__v1__image_manifest__free_unpacked(m, NULL);
  if (rc < 0) {
    st_image_free(img);
    return rc;
  }
  *out = img;
  return ST_OK;
}

int st_image_save(st_store *s, const st_image *img, st_digest *digest_out, st_error *err) {
  _cleanup_free_ uint8_t *buf = NULL;
  size_t len;
  int rc = st_image_encode(img, &buf, &len, err);
  if (rc < 0)
    return rc;
  rc = st_store_put(s, ST_KIND_MANIFEST, buf, len, digest_out, NULL, err);
  return rc < 0 ? rc : st_store_flush(s, err);
}

int st_image_load(st_image **out, st_store *s, const st_digest *d, st_error *err) {
  _cleanup_free_ uint8_t *buf = NULL;
  size_t len;
  char hex[ST_DIGEST_HEX_LEN + 1];
  int rc = st_store_get(s, ST_KIND_MANIFEST, d, &buf, &len, err);
  if (rc == ST_ENOENT)
    return st_error_set(err, ST_ENOENT, "image %s not found", st_digest_hex(d, hex));
  if (rc < 0)
    return rc;
  rc = st_image_decode(out, buf, len, err);
  return rc < 0 ? st_error_prefix(err, "image %s", st_digest_hex(d, hex)) : ST_OK;
}

/* ---- names ---- */

static bool name_ok(const char *n) {
  if (!*n || strlen(n) > 128 || n[strlen(n) - 1] == '/')
    return false;
  for (const char *p = n; *p; p++) {
    bool start = p == n || p[-1] == '/';
    bool alnum = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9');
    if (start ? !alnum : !(alnum || *p == '.' || *p == '_' || *p == '-' || *p == '/'))
      return false;
  }
  return strstr(n, "..") == NULL;
}

static bool tag_ok(const char *t) {
  if (!*t || strlen(t) > 128)
    return false;
  for (const char *p = t; *p; p++) {
    bool alnum = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9');
    if (!(alnum || *p == '_' || (p != t && (*p == '.' || *p == '-'))))
      return false;
  }
  return strstr(t, "..") == NULL;
}

int st_image_ref_parse(const char *text, char **name_out, char **tag_out, st_error *err) {
  const char *colon = strrchr(text, ':');
  if (!colon)
    return st_error_set(err, ST_EINVAL, "image '%s': expected NAME:TAG", text);
  char *name = strndup(text, (size_t)(colon - text));
  char *tag = strdup(colon + 1);
  if (!name || !tag || !name_ok(name) || !tag_ok(tag)) {
    bool oom = !name || !tag;
    free(name);
    free(tag);
    return oom ? st_error_set(err, ST_ENOMEM, "out of memory")
               : st_error_set(err, ST_EINVAL,
                              "image '%s': invalid name or tag (name [a-z0-9._/-], tag "
                              "[A-Za-z0-9._-], at most 128 bytes each)",
                              text);
  }
  *name_out = name;
  *tag_out = tag;
  return ST_OK;
}

static int read_digest_file(st_store *s, const char *meta, st_digest *out, st_error *err) {
  _cleanup_free_ uint8_t *data = NULL;
  size_t len;
  int rc = st_store_meta_get(s, meta, 256, &data, &len, err);
  if (rc < 0)
    return rc;
  char *nl = strchr((char *)data, '\n');
  if (nl)
    *nl = '\0';
  rc = st_digest_parse(out, (char *)data, err);
  return rc < 0 ? st_error_prefix(err, "%s", meta) : ST_OK;
}

static int write_digest_file(st_store *s, const char *meta, const st_digest *d, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], line[80];
  int n = snprintf(line, sizeof line, "sha256:%s\n", st_digest_hex(d, hex));
  return st_store_meta_put(s, meta, line, (size_t)n, err);
}

static int tag_path(char *buf, size_t len, const char *name, const char *tag, st_error *err) {
  if (!name_ok(name) || !tag_ok(tag))
    return st_error_set(err, ST_EINVAL, "image '%s:%s': invalid name or tag", name, tag);
  snprintf(buf, len, "tags/%s/:%s", name, tag);
  return ST_OK;
}

int st_tag_set(st_store *s, const char *name, const char *tag, const st_digest *d,
               st_error *err) {
  char path[512];
  int rc = tag_path(path, sizeof path, name, tag, err);
  return rc < 0 ? rc : write_digest_file(s, path, d, err);
}

int st_tag_get(st_store *s, const char *name, const char *tag, st_digest *out, st_error *err) {
  char path[512];
  int rc = tag_path(path, sizeof path, name, tag, err);
  if (rc < 0)
    return rc;
  rc = read_digest_file(s, path, out, err);
  if (rc == ST_ENOENT)
    return st_error_set(err, ST_ENOENT, "image %s:%s not found", name, tag);
  return rc;
}

int st_tag_delete(st_store *s, const char *name, const char *tag, st_error *err) {
  char path[512];
  int rc = tag_path(path, sizeof path, name, tag, err);
  if (rc < 0)
    return rc;
  rc = st_store_meta_del(s, path, err);
  if (rc == ST_ENOENT)
    return st_error_set(err, ST_ENOENT, "image %s:%s not found", name, tag);
  return rc;
}

struct names {
  char **v;
  size_t n, cap;
};

static int collect_name(const char *name, void *ud) {
  struct names *ns = ud;
  if (ns->n == ns->cap) {
    size_t cap = ns->cap ? ns->cap * 2 : 16;
    char **nv = realloc(ns->v, cap * sizeof *nv);
    if (!nv)
      return ST_ENOMEM;
    ns->v = nv;
    ns->cap = cap;
  }
  if (!(ns->v[ns->n] = strdup(name)))
    return ST_ENOMEM;
  ns->n++;
  return 0;
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int st_tag_list(st_store *s, st_tag_cb cb, void *ud, st_error *err) {
  struct names ns = {0};
  int rc = st_store_meta_list(s, "tags", collect_name, &ns, err);
  if (rc == ST_ENOMEM)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK && ns.n > 1)
    qsort(ns.v, ns.n, sizeof *ns.v, str_cmp);
  for (size_t i = 0; i < ns.n && rc == ST_OK; i++) {
    char *p = ns.v[i] + strlen("tags/");
    char *sep = strstr(p, "/:");
    if (!sep)
      continue;
    *sep = '\0';
    st_digest d;
    char meta[512];
    snprintf(meta, sizeof meta, "tags/%s/:%s", p, sep + 2);
    if (read_digest_file(s, meta, &d, NULL) == ST_OK)
      rc = cb(p, sep + 2, &d, ud);
  }
  for (size_t i = 0; i < ns.n; i++)
    free(ns.v[i]);
  free(ns.v);
  return rc;
}

int st_image_resolve(st_store *s, const char *ref, st_digest *out, st_error *err) {
  if (strncmp(ref, "sha256:", 7) == 0) {
    st_digest d;
    int rc = st_digest_parse(&d, ref, err);
    if (rc < 0)
      return rc;
    rc = st_store_has(s, ST_KIND_MANIFEST, &d, err);
    if (rc == 0)
      return st_error_set(err, ST_ENOENT, "image %s not found", ref);
    if (rc < 0)
      return rc;
    *out = d;
    return ST_OK;
  }
  char *name = NULL, *tag = NULL;
  int rc = st_image_ref_parse(ref, &name, &tag, err);
  if (rc == ST_OK)
    rc = st_tag_get(s, name, tag, out, err);
  free(name);
  free(tag);
  return rc;
}

static void key_path(char *buf, size_t len, const st_digest *key) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  st_digest_hex(key, hex);
  snprintf(buf, len, "keys/%.2s/%s", hex, hex);
}

int st_build_key_get(st_store *s, const st_digest *key, st_digest *layer_out, st_error *err) {
  char path[128];
  key_path(path, sizeof path, key);
  return read_digest_file(s, path, layer_out, err);
}

int st_build_key_set(st_store *s, const st_digest *key, const st_digest *layer, st_error *err) {
  char path[128];
  key_path(path, sizeof path, key);
  return write_digest_file(s, path, layer, err);
}
