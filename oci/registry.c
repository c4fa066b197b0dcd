/* SPDX-License-Identifier: Apache-2.0 */
/* Pushing an image to a registry over the OCI distribution API (libcurl):
 *
 *   layer infos (store cache, else made) ─> for each blob: HEAD
 *      200 ─> skip            404 ─> (make if needed) POST uploads/ ─> PUT ?digest=
 *   ─> PUT manifests/TAG
 *
 * Blobs are made in a temporary directory only when the registry lacks them
 * or their digest is not known from an earlier publish. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "oci-private.h"
#include "progress.h"
#include "unpack.h"

#define BODY_MAX (64u << 10)

struct reg {
  CURL *curl;
  char *base;      /* scheme://host[:port] */
  char *repo, *tag;
  const st_oci_publish_opts *o;
  struct curl_slist *auth;
  char location[2048];
  char body[512];  /* start of the last response body, for messages */
  size_t body_len;
  st_progress *progress;
  uint64_t sent_before; /* bytes of earlier uploads, for progress */
};

/* Splits "HOST[:PORT]/REPO:TAG". */
static int parse_target(struct reg *r, const char *target, st_error *err) {
  const char *slash = strchr(target, '/');
  const char *colon = strrchr(target, ':');
  if (!slash || slash == target || !colon || colon < slash || !colon[1] || colon == slash + 1)
    return st_error_set(err, ST_EINVAL, "registry target '%s': expected HOST[:PORT]/REPO:TAG",
                        target);
  for (const char *p = slash + 1; p < colon; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("._-/", *p)))
      return st_error_set(err, ST_EINVAL, "registry target '%s': bad repository name", target);
  for (const char *p = target; p < slash; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          strchr(".-:[]", *p)))
      return st_error_set(err, ST_EINVAL, "registry target '%s': bad host", target);
  char *t = NULL;
  st_error te = {0};
  if (st_image_ref_parse(slash + 1, &r->repo, &t, &te) < 0)
    return st_error_set(err, ST_EINVAL, "registry target '%s': %s", target, te.msg);
  r->tag = t;
  if (asprintf(&r->base, "%s://%.*s", r->o->insecure ? "http" : "https", (int)(slash - target),
               target) < 0) {
    r->base = NULL;
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  return ST_OK;
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud) {
  struct reg *r = ud;
  size_t len = size * n;
  if (len > 9 && !strncasecmp(buf, "location:", 9)) {
    const char *v = buf + 9;
    size_t vl = len - 9;
    while (vl && (*v == ' ' || *v == '\t'))
      v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
      vl--;
    if (vl < sizeof r->location) {
      memcpy(r->location, v, vl);
      r->location[vl] = '\0';
    }
  }
  return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud) {
  struct reg *r = ud;
  size_t len = size * n;
  size_t room = sizeof r->body - 1 - r->body_len;
  size_t k = len < room ? len : room;
  memcpy(r->body + r->body_len, buf, k);
  r->body_len += k;
  r->body[r->body_len] = '\0';
  return len;
}

static int on_xfer(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow) {
  struct reg *r = ud;
  st_progress_update(r->progress, r->sent_before + (uint64_t)ulnow);
  return 0;
}

/* One line of the response body (for error messages). */
static const char *body_line(struct reg *r) {
  for (char *p = r->body; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
  return r->body;
}

/* Performs the prepared request; *status gets the HTTP status. */
static int perform(struct reg *r, const char *what, long *status, st_error *err) {
  r->location[0] = '\0';
  r->body[0] = '\0';
  r->body_len = 0;
  curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, r->auth);
  CURLcode cc = curl_easy_perform(r->curl);
  if (cc != CURLE_OK)
    return st_error_set(err, cc == CURLE_OPERATION_TIMEDOUT ? ST_ETIMEOUT : ST_EUNAVAIL,
                        "registry %s: %s: %s", r->base, what, curl_easy_strerror(cc));
  curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, status);
  if (*status == 401 || *status == 403)
    return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP %ld (credentials refused or "
                        "missing) %.200s", r->base, what, *status, body_line(r));
  return ST_OK;
}

static void reset(struct reg *r) {
  curl_easy_reset(r->curl);
  curl_easy_setopt(r->curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(r->curl, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(r->curl, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(r->curl, CURLOPT_USERAGENT, "strata");
  curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
  if (r->o->user) {
    curl_easy_setopt(r->curl, CURLOPT_USERNAME, r->o->user);
    curl_easy_setopt(r->curl, CURLOPT_PASSWORD, r->o->password ? r->o->password : "");
    curl_easy_setopt(r->curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
  }
}

static int blob_exists(struct reg *r, const st_digest *d, bool *out, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], url[4096], what[128];
  snprintf(url, sizeof url, "%s/v2/%s/blobs/sha256:%s", r->base, r->repo, st_digest_hex(d, hex));
  snprintf(what, sizeof what, "HEAD blob sha256:%.12s", hex);
  reset(r);
  curl_easy_setopt(r->curl, CURLOPT_URL, url);
  curl_easy_setopt(r->curl, CURLOPT_NOBODY, 1L);
  long status = 0;
  int rc = perform(r, what, &status, err);
  if (rc < 0)
    return rc;
  if (status != 200 && status != 404)
    return st_error_set(err, ST_EUNAVAIL, "registry %s: %s: HTTP %ld", r->base, what, status);
  *out = status == 200;
  return ST_OK;
}

/* POST an upload session, then PUT the file at path as blob d. */
static int blob_upload(struct reg *r, const char *path, const st_digest *d, uint64_t size,
                       st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], url[4096], what[128];
  st_digest_hex(d, hex);
  snprintf(url, sizeof url, "%s/v2/%s/blobs/uploads/", r->base, r->repo);
  snprintf(what, sizeof what, "start upload of blob sha256:%.12s", hex);
  reset(r);
  curl_easy_setopt(r->curl, CURLOPT_URL, url);
  curl_easy_setopt(r->curl, CURLOPT_POST, 1L);
  curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE, 0L);
  curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, "");
  long status = 0;
  int rc = perform(r, what, &status, err);
  if (rc < 0)
    return rc;
  if (status != 202 || !r->location[0])
    return st_error_set(err, ST_EUNAVAIL, "registry %s: %s: HTTP %ld %.200s", r->base, what,
                        status, body_line(r));
  const char *loc = r->location;
  snprintf(url, sizeof url, "%s%s%sdigest=sha256:%s", loc[0] == '/' ? r->base : "", loc,
           strchr(loc, '?') ? "&" : "?", hex);
  _cleanup_fclose_ FILE *f = fopen(path, "rb");
  if (!f)
    return st_error_errno(err, errno, "open %s", path);
  snprintf(what, sizeof what, "upload blob sha256:%.12s", hex);
  reset(r);
  curl_easy_setopt(r->curl, CURLOPT_URL, url);
  curl_easy_setopt(r->curl, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(r->curl, CURLOPT_READDATA, f);
  curl_easy_setopt(r->curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
  curl_easy_setopt(r->curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(r->curl, CURLOPT_XFERINFOFUNCTION, on_xfer);
  curl_easy_setopt(r->curl, CURLOPT_XFERINFODATA, r);
  struct curl_slist *h = NULL;
  for (struct curl_slist *a = r->auth; a; a = a->next)
    h = curl_slist_append(h, a->data);
  h = curl_slist_append(h, "Content-Type: application/octet-stream");
  h = curl_slist_append(h, "Expect:");
  struct curl_slist *saved = r->auth;
  r->auth = h;
  rc = perform(r, what, &status, err);
  r->auth = saved;
  curl_slist_free_all(h);
  if (rc < 0)
    return rc;
  if (status != 201)
    return st_error_set(err, ST_EUNAVAIL, "registry %s: %s: HTTP %ld %.200s", r->base, what,
                        status, body_line(r));
  r->sent_before += size;
  return ST_OK;
}

static int put_manifest(struct reg *r, const char *man, size_t len, st_error *err) {
  char url[4096];
  snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", r->base, r->repo, r->tag);
  reset(r);
  curl_easy_setopt(r->curl, CURLOPT_URL, url);
  curl_easy_setopt(r->curl, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, man);
  curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  struct curl_slist *h = NULL;
  for (struct curl_slist *a = r->auth; a; a = a->next)
    h = curl_slist_append(h, a->data);
  h = curl_slist_append(h, "Content-Type: " ST_OCI_MT_MANIFEST);
  struct curl_slist *saved = r->auth;
  r->auth = h;
  long status = 0;
  int rc = perform(r, "PUT manifest", &status, err);
  r->auth = saved;
  curl_slist_free_all(h);
  if (rc == ST_OK && status != 201 && status != 200)
    rc = st_error_set(err, ST_EUNAVAIL, "registry %s: PUT manifest %s:%s: HTTP %ld %.200s",
                      r->base, r->repo, r->tag, status, body_line(r));
  return rc;
}

/* Pushes the layers (making those needed in tmp), then the config. */
static int push_blobs(struct reg *r, st_store *s, const st_image *img, const char *tmp,
                      st_oci_blob_info *infos, bool *made, st_oci_publish_result *res,
                      st_error *err) {
  const st_oci_publish_opts *o = r->o;
  size_t n = img->n_layers;
  _cleanup_free_ bool *want = calloc(n + 1, sizeof *want);
  _cleanup_free_ bool *missing = calloc(n + 1, sizeof *missing);
  if (!want || !missing)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    want[i] = !st_oci_cache_get(s, &img->layers[i].digest, o->compression, &infos[i]);
  int rc = st_oci_make_layers(s, img, want, o->compression, tmp, o->threads, o->progress, infos,
                              err);
  for (size_t i = 0; rc == ST_OK && i < n; i++)
    made[i] = want[i];
  bool any = false;
  for (size_t i = 0; rc == ST_OK && i < n; i++) {
    bool have = false;
    rc = blob_exists(r, &infos[i].digest, &have, err);
    missing[i] = !have;
    want[i] = !have && !made[i];
    any = any || want[i];
  }
  if (rc == ST_OK && any) /* known from the cache but absent there: make them now */
    rc = st_oci_make_layers(s, img, want, o->compression, tmp, o->threads, o->progress, infos,
                            err);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += missing[i] ? infos[i].size : 0;
  r->progress = st_progress_new("upload", total, o->progress);
  for (size_t i = 0; rc == ST_OK && i < n; i++) {
    res->layers_made += made[i] || want[i];
    if (!missing[i])
      continue;
    char hex[ST_DIGEST_HEX_LEN + 1], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", tmp, st_digest_hex(&infos[i].digest, hex));
    rc = blob_upload(r, path, &infos[i].digest, infos[i].size, err);
    if (rc == ST_OK) {
      res->blobs_uploaded++;
      res->bytes_uploaded += infos[i].size;
      res->layer_bytes_uploaded += infos[i].size;
    }
  }
  st_progress_free(r->progress);
  r->progress = NULL;
  return rc;
}

static int push(struct reg *r, st_store *s, const st_image *img, const char *tmp,
                st_oci_publish_result *res, st_error *err) {
  size_t n = img->n_layers;
  _cleanup_free_ st_oci_blob_info *infos = calloc(n + 1, sizeof *infos);
  _cleanup_free_ bool *made = calloc(n + 1, sizeof *made);
  if (!infos || !made)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = push_blobs(r, s, img, tmp, infos, made, res, err);
  _cleanup_free_ char *cfg = NULL, *man = NULL;
  size_t cfg_len = 0, man_len = 0;
  if (rc == ST_OK)
    rc = st_oci_image_docs(img, infos, r->o->compression, &cfg, &cfg_len, &man, &man_len, err);
  st_digest cd;
  bool have = false;
  if (rc == ST_OK)
    rc = st_oci_write_blob(tmp, cfg, cfg_len, &cd, err);
  if (rc == ST_OK)
    rc = blob_exists(r, &cd, &have, err);
  if (rc == ST_OK && !have) {
    char hex[ST_DIGEST_HEX_LEN + 1], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", tmp, st_digest_hex(&cd, hex));
    rc = blob_upload(r, path, &cd, cfg_len, err);
    if (rc == ST_OK) {
      res->blobs_uploaded++;
      res->bytes_uploaded += cfg_len;
    }
  }
  if (rc == ST_OK)
    rc = put_manifest(r, man, man_len, err);
  if (rc == ST_OK) {
    st_sha256(&res->manifest, man, man_len);
    res->manifest_size = man_len;
    res->layers = n;
    for (size_t i = 0; i < n; i++)
      res->bytes_total += infos[i].size;
  }
  return rc;
}

int st_oci_publish_registry(st_store *s, const st_image *img, const char *target,
                            const st_oci_publish_opts *o, st_oci_publish_result *res,
                            st_error *err) {
  struct reg r = {.o = o};
  *res = (st_oci_publish_result){0};
  int rc = parse_target(&r, target, err);
  char tmp[PATH_MAX] = "";
  if (rc == ST_OK) {
    const char *base = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/strata-push-XXXXXX", base && *base ? base : "/var/tmp");
    if (!mkdtemp(tmp)) {
      rc = st_error_errno(err, errno, "mkdtemp %s", tmp);
      tmp[0] = '\0';
    }
  }
  if (rc == ST_OK && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    rc = st_error_set(err, ST_EIO, "libcurl initialisation failed");
  else if (rc == ST_OK) {
    r.curl = curl_easy_init();
    if (o->token) {
      char *h = NULL;
      if (asprintf(&h, "Authorization: Bearer %s", o->token) >= 0) {
        r.auth = curl_slist_append(NULL, h);
        free(h);
      }
    }
    if (!r.curl || (o->token && !r.auth))
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
    if (rc == ST_OK)
      rc = push(&r, s, img, tmp, res, err);
    curl_slist_free_all(r.auth);
    if (r.curl)
      curl_easy_cleanup(r.curl);
    curl_global_cleanup();
  }
  if (tmp[0])
    st_remove_tree(AT_FDCWD, tmp, NULL);
  free(r.base);
  free(r.repo);
  free(r.tag);
  return rc;
}
