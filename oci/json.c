/* SPDX-License-Identifier: Apache-2.0 */
/* OCI JSON documents: index, manifest and config parsed from untrusted bytes
 * into plain structs, and written deterministically (sorted keys, compact). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oci.h"

static void desc_clear(st_oci_desc *d) {
  free(d->media_type);
  free(d->ref_name);
  memset(d, 0, sizeof *d);
}

static void kvs_free(st_kv *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) {
    free(v[i].key);
    free(v[i].value);
  }
  free(v);
}

static void strv_free(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    free(v[i]);
  free(v);
}

void st_oci_index_free(st_oci_index *x) {
  if (!x)
    return;
  for (size_t i = 0; i < x->n; i++)
    desc_clear(&x->manifests[i]);
  free(x->manifests);
  free(x);
}

void st_oci_manifest_free(st_oci_manifest *m) {
  if (!m)
    return;
  free(m->media_type);
  desc_clear(&m->config);
  for (size_t i = 0; i < m->n_layers; i++)
    desc_clear(&m->layers[i]);
  free(m->layers);
  free(m);
}

void st_oci_config_free(st_oci_config *c) {
  if (!c)
    return;
  kvs_free(c->env, c->n_env);
  strv_free(c->entrypoint, c->n_entrypoint);
  strv_free(c->cmd, c->n_cmd);
  free(c->workdir);
  kvs_free(c->labels, c->n_labels);
  free(c->diff_ids);
  free(c);
}

bool st_oci_layer_type_ok(const char *mt) {
  return mt && (!strcmp(mt, ST_OCI_MT_LAYER) || !strcmp(mt, ST_OCI_MT_LAYER_GZIP) ||
                !strcmp(mt, ST_OCI_MT_LAYER_ZSTD) || !strcmp(mt, ST_DOCKER_MT_LAYER_GZIP) ||
                !strcmp(mt, "application/vnd.docker.image.rootfs.diff.tar"));
}

/* ---- parsing ---- */

static int load(json_t **out, const uint8_t *data, size_t len, st_error *err) {
  if (len > ST_OCI_JSON_MAX)
    return st_error_set(err, ST_ELIMIT, "JSON document over %u bytes", ST_OCI_JSON_MAX);
  json_error_t je;
  json_t *j = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &je);
  if (!j)
    return st_error_set(err, ST_EFORMAT, "invalid JSON at line %d column %d: %s", je.line,
                        je.column, je.text);
  if (!json_is_object(j)) {
    json_decref(j);
    return st_error_set(err, ST_EFORMAT, "not a JSON object");
  }
  *out = j;
  return ST_OK;
}

/* A string member (optional unless required). NUL bytes are refused. */
static int get_str(json_t *o, const char *key, bool required, char **out, st_error *err) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) {
    if (required)
      return st_error_set(err, ST_EFORMAT, "missing \"%s\"", key);
    return ST_OK;
  }
  if (!json_is_string(v))
    return st_error_set(err, ST_EFORMAT, "\"%s\" is not a string", key);
  if (strlen(json_string_value(v)) != json_string_length(v))
    return st_error_set(err, ST_EFORMAT, "\"%s\" contains a NUL byte", key);
  if (!(*out = strdup(json_string_value(v))))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  return ST_OK;
}

static int parse_digest(json_t *v, const char *what, st_digest *out, st_error *err) {
  if (!json_is_string(v))
    return st_error_set(err, ST_EFORMAT, "%s: digest is not a string", what);
  const char *s = json_string_value(v);
  if (strncmp(s, "sha256:", 7) || strlen(s) != 7 + ST_DIGEST_HEX_LEN)
    return st_error_set(err, ST_EFORMAT, "%s: unsupported digest '%.80s' (sha256 only)", what,
                        s);
  if (st_digest_parse(out, s, NULL) < 0)
    return st_error_set(err, ST_EFORMAT, "%s: malformed digest '%.80s'", what, s);
  return ST_OK;
}

static int parse_desc(json_t *o, const char *what, st_oci_desc *d, st_error *err) {
  if (!json_is_object(o))
    return st_error_set(err, ST_EFORMAT, "%s is not an object", what);
  int rc = get_str(o, "mediaType", true, &d->media_type, err);
  if (rc < 0)
    return st_error_prefix(err, "%s", what);
  json_t *dg = json_object_get(o, "digest");
  if (!dg)
    return st_error_set(err, ST_EFORMAT, "%s: missing \"digest\"", what);
  if ((rc = parse_digest(dg, what, &d->digest, err)) < 0)
    return rc;
  json_t *sz = json_object_get(o, "size");
  if (!json_is_integer(sz) || json_integer_value(sz) < 0)
    return st_error_set(err, ST_EFORMAT, "%s: \"size\" missing or not a non-negative integer",
                        what);
  d->size = (uint64_t)json_integer_value(sz);
  json_t *ann = json_object_get(o, "annotations");
  if (ann && !json_is_null(ann)) {
    if (!json_is_object(ann))
      return st_error_set(err, ST_EFORMAT, "%s: \"annotations\" is not an object", what);
    if ((rc = get_str(ann, ST_OCI_REF_NAME, false, &d->ref_name, err)) < 0)
      return st_error_prefix(err, "%s: annotations", what);
  }
  return ST_OK;
}

static int get_array(json_t *o, const char *key, bool required, json_t **out, st_error *err) {
  json_t *v = json_object_get(o, key);
  *out = NULL;
  if (!v || json_is_null(v))
    return required ? st_error_set(err, ST_EFORMAT, "missing \"%s\"", key) : ST_OK;
  if (!json_is_array(v))
    return st_error_set(err, ST_EFORMAT, "\"%s\" is not an array", key);
  if (json_array_size(v) > ST_OCI_LIST_MAX)
    return st_error_set(err, ST_ELIMIT, "\"%s\" has more than %d entries", key,
                        ST_OCI_LIST_MAX);
  *out = v;
  return ST_OK;
}

static int check_schema(json_t *j, st_error *err) {
  json_t *v = json_object_get(j, "schemaVersion");
  if (!json_is_integer(v) || json_integer_value(v) != 2)
    return st_error_set(err, ST_EFORMAT, "\"schemaVersion\" is not 2");
  return ST_OK;
}

int st_oci_index_parse(st_oci_index **out, const uint8_t *data, size_t len, st_error *err) {
  json_t *j = NULL;
  int rc = load(&j, data, len, err);
  if (rc < 0)
    return rc;
  json_t *arr = NULL;
  st_oci_index *x = calloc(1, sizeof *x);
  if (!x)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK)
    rc = check_schema(j, err);
  if (rc == ST_OK)
    rc = get_array(j, "manifests", true, &arr, err);
  if (rc == ST_OK && !(x->manifests = calloc(json_array_size(arr) + 1, sizeof *x->manifests)))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; rc == ST_OK && i < json_array_size(arr); i++, x->n++) {
    char what[48];
    snprintf(what, sizeof what, "manifests[%zu]", i);
    rc = parse_desc(json_array_get(arr, i), what, &x->manifests[i], err);
  }
  json_decref(j);
  if (rc < 0) {
    st_oci_index_free(x);
    return rc;
  }
  *out = x;
  return ST_OK;
}

int st_oci_manifest_parse(st_oci_manifest **out, const uint8_t *data, size_t len,
                          st_error *err) {
  json_t *j = NULL;
  int rc = load(&j, data, len, err);
  if (rc < 0)
    return rc;
  json_t *arr = NULL;
  st_oci_manifest *m = calloc(1, sizeof *m);
  if (!m)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  if (rc == ST_OK)
    rc = check_schema(j, err);
  if (rc == ST_OK)
    rc = get_str(j, "mediaType", false, &m->media_type, err);
  if (rc == ST_OK && m->media_type && strcmp(m->media_type, ST_OCI_MT_MANIFEST) &&
      strcmp(m->media_type, ST_DOCKER_MT_MANIFEST))
    rc = st_error_set(err, ST_EFORMAT, "not an image manifest (mediaType %.100s)",
                      m->media_type);
  if (rc == ST_OK)
    rc = parse_desc(json_object_get(j, "config"), "config", &m->config, err);
  if (rc == ST_OK)
    rc = get_array(j, "layers", true, &arr, err);
  if (rc == ST_OK && !(m->layers = calloc(json_array_size(arr) + 1, sizeof *m->layers)))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; rc == ST_OK && i < json_array_size(arr); i++, m->n_layers++) {
    char what[48];
    snprintf(what, sizeof what, "layers[%zu]", i);
    rc = parse_desc(json_array_get(arr, i), what, &m->layers[i], err);
    if (rc == ST_OK && !st_oci_layer_type_ok(m->layers[i].media_type))
      rc = st_error_set(err, ST_EFORMAT, "%s: unsupported media type %.100s", what,
                        m->layers[i].media_type);
  }
  json_decref(j);
  if (rc < 0) {
    st_oci_manifest_free(m);
    return rc;
  }
  *out = m;
  return ST_OK;
}

static int parse_strv(json_t *o, const char *key, char ***out, size_t *n, bool *has,
                      st_error *err) {
  json_t *arr = NULL;
  int rc = get_array(o, key, false, &arr, err);
  if (rc < 0 || !arr)
    return rc;
  *has = true;
  if (!(*out = calloc(json_array_size(arr) + 1, sizeof **out)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < json_array_size(arr); i++, (*n)++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
      return st_error_set(err, ST_EFORMAT, "\"%s\"[%zu] is not a string", key, i);
    if (!((*out)[i] = strdup(json_string_value(v))))
      return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  return ST_OK;
}

static int kv_cmp(const void *a, const void *b) {
  return strcmp(((const st_kv *)a)->key, ((const st_kv *)b)->key);
}

static int parse_env(json_t *cfg, st_oci_config *c, st_error *err) {
  char **v = NULL;
  size_t n = 0;
  bool has = false;
  int rc = parse_strv(cfg, "Env", &v, &n, &has, err);
  if (rc == ST_OK && n && !(c->env = calloc(n, sizeof *c->env)))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; rc == ST_OK && i < n; i++) {
    char *eq = strchr(v[i], '=');
    if (!eq || eq == v[i]) {
      rc = st_error_set(err, ST_EFORMAT, "\"Env\"[%zu] is not NAME=VALUE", i);
      break;
    }
    st_kv *kv = &c->env[c->n_env];
    kv->key = strndup(v[i], (size_t)(eq - v[i]));
    kv->value = strdup(eq + 1);
    c->n_env++;
    if (!kv->key || !kv->value)
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
  }
  strv_free(v, n);
  return rc;
}

static int parse_labels(json_t *cfg, st_oci_config *c, st_error *err) {
  json_t *l = json_object_get(cfg, "Labels");
  if (!l || json_is_null(l))
    return ST_OK;
  if (!json_is_object(l))
    return st_error_set(err, ST_EFORMAT, "\"Labels\" is not an object");
  if (json_object_size(l) > ST_OCI_LIST_MAX)
    return st_error_set(err, ST_ELIMIT, "\"Labels\" has more than %d entries", ST_OCI_LIST_MAX);
  if (!(c->labels = calloc(json_object_size(l) + 1, sizeof *c->labels)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  const char *k;
  json_t *v;
  json_object_foreach(l, k, v) {
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
      return st_error_set(err, ST_EFORMAT, "label \"%.100s\" is not a string", k);
    st_kv *kv = &c->labels[c->n_labels++];
    kv->key = strdup(k);
    kv->value = strdup(json_string_value(v));
    if (!kv->key || !kv->value)
      return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  if (c->n_labels > 1)
    qsort(c->labels, c->n_labels, sizeof *c->labels, kv_cmp);
  return ST_OK;
}

static int parse_rootfs(json_t *j, st_oci_config *c, st_error *err) {
  json_t *r = json_object_get(j, "rootfs"), *arr = NULL;
  if (!json_is_object(r))
    return st_error_set(err, ST_EFORMAT, "missing \"rootfs\"");
  int rc = get_array(r, "diff_ids", true, &arr, err);
  if (rc < 0)
    return st_error_prefix(err, "rootfs");
  if (!(c->diff_ids = calloc(json_array_size(arr) + 1, sizeof *c->diff_ids)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < json_array_size(arr); i++, c->n_diff_ids++)
    if ((rc = parse_digest(json_array_get(arr, i), "rootfs.diff_ids", &c->diff_ids[i], err)) < 0)
      return rc;
  return ST_OK;
}

int st_oci_config_parse(st_oci_config **out, const uint8_t *data, size_t len, st_error *err) {
  json_t *j = NULL;
  int rc = load(&j, data, len, err);
  if (rc < 0)
    return rc;
  st_oci_config *c = calloc(1, sizeof *c);
  if (!c)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  json_t *cfg = json_object_get(j, "config");
  if (rc == ST_OK && cfg && !json_is_null(cfg) && !json_is_object(cfg))
    rc = st_error_set(err, ST_EFORMAT, "\"config\" is not an object");
  if (rc == ST_OK && json_is_object(cfg)) {
    rc = parse_env(cfg, c, err);
    if (rc == ST_OK)
      rc = parse_strv(cfg, "Entrypoint", &c->entrypoint, &c->n_entrypoint, &c->has_entrypoint,
                      err);
    if (rc == ST_OK)
      rc = parse_strv(cfg, "Cmd", &c->cmd, &c->n_cmd, &c->has_cmd, err);
    if (rc == ST_OK)
      rc = get_str(cfg, "WorkingDir", false, &c->workdir, err);
    if (rc == ST_OK && c->workdir && !c->workdir[0]) {
      free(c->workdir);
      c->workdir = NULL;
    }
    if (rc == ST_OK)
      rc = parse_labels(cfg, c, err);
    if (rc < 0)
      st_error_prefix(err, "config");
  }
  if (rc == ST_OK)
    rc = parse_rootfs(j, c, err);
  json_decref(j);
  if (rc < 0) {
    st_oci_config_free(c);
    return rc;
  }
  *out = c;
  return ST_OK;
}

/* ---- docker archives: manifest.json ---- */

static void docker_image_clear(st_docker_image *d) {
  free(d->config);
  strv_free(d->repo_tags, d->n_repo_tags);
  strv_free(d->layers, d->n_layers);
}

void st_docker_manifest_free(st_docker_manifest *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->n; i++)
    docker_image_clear(&m->images[i]);
  free(m->images);
  free(m);
}

static int parse_docker_image(json_t *o, st_docker_image *d, st_error *err) {
  if (!json_is_object(o))
    return st_error_set(err, ST_EFORMAT, "not an object");
  bool has = false;
  int rc = get_str(o, "Config", true, &d->config, err);
  if (rc == ST_OK)
    rc = parse_strv(o, "RepoTags", &d->repo_tags, &d->n_repo_tags, &has, err);
  if (rc == ST_OK)
    rc = parse_strv(o, "Layers", &d->layers, &d->n_layers, &has, err);
  if (rc == ST_OK && !d->layers)
    rc = st_error_set(err, ST_EFORMAT, "missing \"Layers\"");
  return rc;
}

int st_docker_manifest_parse(st_docker_manifest **out, const uint8_t *data, size_t len,
                             st_error *err) {
  if (len > ST_OCI_JSON_MAX)
    return st_error_set(err, ST_ELIMIT, "JSON document over %u bytes", ST_OCI_JSON_MAX);
  json_error_t je;
  json_t *j = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &je);
  if (!j)
    return st_error_set(err, ST_EFORMAT, "invalid JSON at line %d column %d: %s", je.line,
                        je.column, je.text);
  int rc = ST_OK;
  st_docker_manifest *m = calloc(1, sizeof *m);
  if (!m)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  else if (!json_is_array(j) || !json_array_size(j))
    rc = st_error_set(err, ST_EFORMAT, "not a non-empty JSON array");
  else if (json_array_size(j) > ST_OCI_LIST_MAX)
    rc = st_error_set(err, ST_ELIMIT, "more than %d images", ST_OCI_LIST_MAX);
  else if (!(m->images = calloc(json_array_size(j), sizeof *m->images)))
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; rc == ST_OK && i < json_array_size(j); i++, m->n++)
    if ((rc = parse_docker_image(json_array_get(j, i), &m->images[i], err)) < 0)
      st_error_prefix(err, "[%zu]", i);
  json_decref(j);
  if (rc < 0) {
    st_docker_manifest_free(m);
    return rc;
  }
  *out = m;
  return ST_OK;
}

/* ---- writing ---- */

static int dump(json_t *j, char **out, size_t *len, st_error *err) {
  if (!j)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(j);
  if (!s)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  *out = s;
  *len = strlen(s);
  return ST_OK;
}

static json_t *desc_json(const st_oci_desc *d) {
  char hex[ST_DIGEST_HEX_LEN + 1], dg[80];
  snprintf(dg, sizeof dg, "sha256:%s", st_digest_hex(&d->digest, hex));
  json_t *o = json_pack("{s:s, s:s, s:I}", "mediaType", d->media_type, "digest", dg, "size",
                        (json_int_t)d->size);
  if (o && d->ref_name)
    json_object_set_new(o, "annotations", json_pack("{s:s}", ST_OCI_REF_NAME, d->ref_name));
  return o;
}

/* Creation times are not part of a strata image: a fixed one keeps the
 * config deterministic. */
#define EPOCH "1970-01-01T00:00:00Z"

static const char *host_arch(void) {
#if defined(__x86_64__)
  return "amd64";
#elif defined(__aarch64__)
  return "arm64";
#elif defined(__powerpc64__)
  return "ppc64le";
#elif defined(__s390x__)
  return "s390x";
#else
  return "unknown";
#endif
}

int st_oci_config_json(const st_image *img, const st_digest *diff_ids, char **out, size_t *len,
                       st_error *err) {
  json_t *cfg = json_object(), *env = json_array(), *ids = json_array(), *hist = json_array();
  json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:o}, s:o}", "architecture", host_arch(), "created",
                        EPOCH, "os", "linux", "config", cfg, "rootfs", "type", "layers", "diff_ids", ids,
                        "history", hist);
  if (!j || !env)
    return dump(NULL, out, len, err);
  for (size_t i = 0; i < img->n_env; i++) {
    char *s = NULL;
    if (asprintf(&s, "%s=%s", img->env[i].key, img->env[i].value) < 0)
      s = NULL;
    json_array_append_new(env, json_string(s ? s : ""));
    free(s);
  }
  if (img->n_env)
    json_object_set(cfg, "Env", env);
  json_decref(env);
  if (img->n_entrypoint) {
    json_t *ep = json_array();
    for (size_t i = 0; i < img->n_entrypoint; i++)
      json_array_append_new(ep, json_string(img->entrypoint[i]));
    json_object_set_new(cfg, "Entrypoint", ep);
  }
  if (img->workdir)
    json_object_set_new(cfg, "WorkingDir", json_string(img->workdir));
  if (img->n_labels) {
    json_t *lb = json_object();
    for (size_t i = 0; i < img->n_labels; i++)
      json_object_set_new(lb, img->labels[i].key, json_string(img->labels[i].value));
    json_object_set_new(cfg, "Labels", lb);
  }
  char hex[ST_DIGEST_HEX_LEN + 1], dg[80];
  for (size_t i = 0; i < img->n_layers; i++) {
    snprintf(dg, sizeof dg, "sha256:%s", st_digest_hex(&diff_ids[i], hex));
    json_array_append_new(ids, json_string(dg));
    char by[320];
    snprintf(by, sizeof by, "strata layer %s", img->layers[i].name);
    json_array_append_new(hist, json_pack("{s:s, s:s}", "created", EPOCH, "created_by", by));
  }
  return dump(j, out, len, err);
}

int st_oci_manifest_json(const st_oci_desc *config, const st_oci_desc *layers, size_t n,
                         char **out, size_t *len, st_error *err) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < n; i++)
    json_array_append_new(arr, desc_json(&layers[i]));
  json_t *j = arr ? json_pack("{s:i, s:s, s:o, s:o}", "schemaVersion", 2, "mediaType",
                              ST_OCI_MT_MANIFEST, "config", desc_json(config), "layers", arr)
                  : NULL;
  return dump(j, out, len, err);
}

int st_oci_index_json(const uint8_t *old, size_t old_len, const st_oci_desc *desc, char **out,
                      size_t *len, st_error *err) {
  json_t *j = NULL, *arr = NULL;
  if (old) {
    _cleanup_(st_oci_index_freep) st_oci_index *check = NULL;
    int rc = st_oci_index_parse(&check, old, old_len, err); /* validates */
    if (rc < 0)
      return rc;
    if ((rc = load(&j, old, old_len, err)) < 0)
      return rc;
    arr = json_object_get(j, "manifests");
    for (size_t i = json_array_size(arr); i-- > 0;) {
      json_t *ann = json_object_get(json_array_get(arr, i), "annotations");
      json_t *rn = json_object_get(ann, ST_OCI_REF_NAME);
      if (desc->ref_name && json_is_string(rn) && !strcmp(json_string_value(rn), desc->ref_name))
        json_array_remove(arr, i);
    }
  } else {
    j = json_pack("{s:i, s:s, s:[]}", "schemaVersion", 2, "mediaType", ST_OCI_MT_INDEX,
                  "manifests");
    arr = json_object_get(j, "manifests");
  }
  if (j && arr)
    json_array_append_new(arr, desc_json(desc));
  return dump(j, out, len, err);
}
