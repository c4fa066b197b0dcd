/* SPDX-License-Identifier: Apache-2.0 */
/* Pushing an image to a registry over the OCI distribution API (libcurl):
 *
 *   layer infos (store cache, else made) ─> for each blob: HEAD
 *      200 ─> skip            404 ─> (make if needed) POST uploads/ ─> PUT ?digest=
 *   ─> PUT manifests/TAG
 *
 * Blobs are made in a temporary directory only when the registry lacks them
 * or their digest is not known from an earlier publish. Every request goes
 * through request(): on HTTP 401 it reads the challenge and tries again with
 * basic credentials or a bearer token fetched from the token server
 * (registry-auth.c), which is then kept for the rest of the push. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "oci-private.h"
#include "progress.h"
#include "registry-auth.h"
#include "unpack.h"

#define TOKEN_CHARS                                                                      \
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=!#$%&'*^`|:,;@?()[]{}<>"

enum auth_mode { AUTH_NONE, AUTH_BASIC, AUTH_BEARER, AUTH_FIXED_TOKEN };

struct reg {
  CURL *curl;
  char *base;      /* scheme://host[:port] */
  char *repo, *tag;
  const st_oci_publish_opts *o;
  char location[2048];
  char body[512];  /* start of the last response body, for messages */
  size_t body_len;
  st_progress *progress;
  uint64_t sent_before; /* bytes of earlier uploads, for progress */
  /* authentication */
  enum auth_mode mode;
  char challenge[2048];  /* the last Bearer (else Basic) WWW-Authenticate value */
  bool challenge_bearer;
  char *bearer;          /* owned: the bearer token in use */
  time_t bearer_expires;
  st_oci_scopes scopes;  /* what the token was asked for */
};

/* One request: method, URL, body from memory or a file. */
struct req {
  const char *what;         /* for messages */
  const char *method;       /* "HEAD", "POST", "PUT" */
  const char *url;
  const char *content_type; /* nullable */
  const void *data;         /* nullable: body in memory */
  size_t len;
  FILE *file;               /* nullable: body from a file (rewound per try) */
  uint64_t file_size;
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

/* The value of header `name` (len bytes incl. CRLF) trimmed, or NULL. */
static const char *header_value(const char *buf, size_t len, const char *name, size_t *vl) {
  size_t nl = strlen(name);
  if (len <= nl || strncasecmp(buf, name, nl))
    return NULL;
  const char *v = buf + nl;
  size_t n = len - nl;
  while (n && (*v == ' ' || *v == '\t'))
    v++, n--;
  while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
    n--;
  *vl = n;
  return v;
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud) {
  struct reg *r = ud;
  size_t len = size * n, vl;
  const char *v;
  if ((v = header_value(buf, len, "location:", &vl)) && vl < sizeof r->location) {
    memcpy(r->location, v, vl);
    r->location[vl] = '\0';
  } else if ((v = header_value(buf, len, "www-authenticate:", &vl)) &&
             vl < sizeof r->challenge) {
    /* several challenges: a Bearer one wins over Basic */
    bool bearer = vl >= 6 && !strncasecmp(v, "bearer", 6);
    if (!r->challenge[0] || (bearer && !r->challenge_bearer)) {
      memcpy(r->challenge, v, vl);
      r->challenge[vl] = '\0';
      r->challenge_bearer = bearer;
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

/* Sets up curl for q with the current credentials; *h gets the header list. */
static int setup(struct reg *r, const struct req *q, struct curl_slist **h, st_error *err) {
  CURL *c = r->curl;
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "strata");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_URL, q->url);
  if (r->o->ca_file)
    curl_easy_setopt(c, CURLOPT_CAINFO, r->o->ca_file);
  if (r->mode == AUTH_BASIC) {
    curl_easy_setopt(c, CURLOPT_USERNAME, r->o->user);
    curl_easy_setopt(c, CURLOPT_PASSWORD, r->o->password ? r->o->password : "");
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
  }
  if (!strcmp(q->method, "HEAD")) {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (q->file) {
    if (fseeko(q->file, 0, SEEK_SET) < 0)
      return st_error_errno(err, errno, "registry %s: %s: rewind", r->base, q->what);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READDATA, q->file);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->file_size);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
  } else {
    if (!strcmp(q->method, "POST"))
      curl_easy_setopt(c, CURLOPT_POST, 1L);
    else
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->data ? q->data : "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->len);
  }
  char line[64 + (16u << 10)];
  bool ok = true;
  if (r->bearer) {
    snprintf(line, sizeof line, "Authorization: Bearer %s", r->bearer);
    ok = (*h = curl_slist_append(*h, line));
  }
  if (ok && q->content_type) {
    snprintf(line, sizeof line, "Content-Type: %s", q->content_type);
    ok = (*h = curl_slist_append(*h, line));
  }
  if (ok)
    ok = (*h = curl_slist_append(*h, "Expect:"));
  if (!ok)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, *h);
  return ST_OK;
}

static int bearer_refresh(struct reg *r, const st_oci_challenge *c, st_error *err) {
  const st_oci_publish_opts *o = r->o;
  st_oci_token_req tq = {.registry = r->base, .user = o->user, .password = o->password,
                         .ca_file = o->ca_file};
  char *tok = NULL;
  long expires = 0;
  int rc = st_oci_token_fetch(r->curl, &tq, c, &r->scopes, &tok, &expires, err);
  if (rc < 0)
    return rc;
  free(r->bearer);
  r->bearer = tok;
  r->bearer_expires = time(NULL) + expires;
  r->mode = AUTH_BEARER;
  st_debug("registry %s: bearer token for %zu scope(s), valid %ld s", r->base, r->scopes.n,
           expires);
  return ST_OK;
}

/* After a 401: decides how to authenticate the next try, or fails. */
static int on_unauthorized(struct reg *r, const char *what, st_error *err) {
  const st_oci_publish_opts *o = r->o;
  st_oci_challenge c;
  st_error ce = {0};
  if (!r->challenge[0])
    return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401 without an authentication "
                        "challenge", r->base, what);
  if (st_oci_challenge_parse(&c, r->challenge, strlen(r->challenge), &ce) < 0)
    return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401: %s", r->base, what, ce.msg);
  if (r->mode == AUTH_FIXED_TOKEN)
    return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401 (the --token was refused)",
                        r->base, what);
  if (c.scheme == ST_OCI_AUTH_BASIC) {
    if (!o->user)
      return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401 (the registry wants a user "
                          "name and password: --username and --password-stdin)", r->base, what);
    if (r->mode == AUTH_BASIC)
      return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401 (user '%s': wrong user "
                          "name or password)", r->base, what, o->user);
    r->mode = AUTH_BASIC;
    return ST_OK;
  }
  /* Bearer: ask for push and pull of the repository, plus what is challenged */
  char own[600];
  snprintf(own, sizeof own, "repository:%s:pull,push", r->repo);
  bool grew = false, grew2 = false;
  if (st_oci_scopes_add(&r->scopes, own, &grew, &ce) < 0 ||
      st_oci_scopes_add(&r->scopes, c.scope, &grew2, &ce) < 0)
    return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401: %s", r->base, what, ce.msg);
  bool expired = r->bearer && time(NULL) >= r->bearer_expires;
  if (r->mode == AUTH_BEARER && !grew && !grew2 && !expired)
    return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401 (the token for %s was "
                        "refused%s%s)", r->base, what, c.scope[0] ? c.scope : own,
                        c.error[0] ? ": " : "", c.error);
  return bearer_refresh(r, &c, err);
}

/* Performs q, authenticating on a 401 as the registry asks; *status gets the
 * final HTTP status (401 and 403 are errors). */
static int request(struct reg *r, const struct req *q, long *status, st_error *err) {
  for (int attempt = 0;; attempt++) {
    r->location[0] = r->body[0] = r->challenge[0] = '\0';
    r->body_len = 0;
    r->challenge_bearer = false;
    struct curl_slist *h = NULL;
    int rc = setup(r, q, &h, err);
    CURLcode cc = rc == ST_OK ? curl_easy_perform(r->curl) : CURLE_OK;
    curl_slist_free_all(h);
    if (rc < 0)
      return rc;
    if (cc != CURLE_OK)
      return st_error_set(err, cc == CURLE_OPERATION_TIMEDOUT ? ST_ETIMEOUT : ST_EUNAVAIL,
                          "registry %s: %s: %s", r->base, q->what, curl_easy_strerror(cc));
    curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, status);
    if (*status == 403)
      return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 403 (access denied) %.200s",
                          r->base, q->what, body_line(r));
    if (*status != 401)
      return ST_OK;
    if (attempt == 4)
      return st_error_set(err, ST_EAUTH, "registry %s: %s: HTTP 401 after %d tries", r->base,
                          q->what, attempt + 1);
    if ((rc = on_unauthorized(r, q->what, err)) < 0)
      return rc;
  }
}

static int blob_exists(struct reg *r, const st_digest *d, bool *out, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], url[4096], what[128];
  snprintf(url, sizeof url, "%s/v2/%s/blobs/sha256:%s", r->base, r->repo, st_digest_hex(d, hex));
  snprintf(what, sizeof what, "HEAD blob sha256:%.12s", hex);
  struct req q = {.what = what, .method = "HEAD", .url = url};
  long status = 0;
  int rc = request(r, &q, &status, err);
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
  struct req q = {.what = what, .method = "POST", .url = url};
  long status = 0;
  int rc = request(r, &q, &status, err);
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
  q = (struct req){.what = what, .method = "PUT", .url = url,
                   .content_type = "application/octet-stream", .file = f, .file_size = size};
  if ((rc = request(r, &q, &status, err)) < 0)
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
  struct req q = {.what = "PUT manifest", .method = "PUT", .url = url,
                  .content_type = ST_OCI_MT_MANIFEST, .data = man, .len = len};
  long status = 0;
  int rc = request(r, &q, &status, err);
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
    if (o->token && (!o->token[0] || strlen(o->token) > (16u << 10) ||
                     strspn(o->token, TOKEN_CHARS) != strlen(o->token)))
      rc = st_error_set(err, ST_EINVAL, "registry %s: the token is empty, too long or not "
                        "printable ASCII", r.base);
    else if (o->token) {
      r.bearer = strdup(o->token);
      r.mode = AUTH_FIXED_TOKEN;
    }
    if (rc == ST_OK && (!r.curl || (o->token && !r.bearer)))
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
    if (rc == ST_OK)
      rc = push(&r, s, img, tmp, res, err);
    free(r.bearer);
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
