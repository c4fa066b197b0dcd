/* SPDX-License-Identifier: Apache-2.0 */
/* Registry authentication: parsing WWW-Authenticate challenges, the scope
 * set a bearer token is asked for, and the token exchange of the
 * distribution token protocol (registry-auth.h). Everything read here comes
 * from the network and is bounded before use. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "registry-auth.h"

#define TOKEN_BODY_MAX (64u << 10)
#define TOKEN_MAX (16u << 10)

/* ---- WWW-Authenticate ---- */

static bool is_tchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~/=", c)); /* token68 may end in '=' */
}

struct lexer {
  const char *p, *end;
};

static void skip_ws(struct lexer *x) {
  while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\r' || *x->p == '\n'))
    x->p++;
}

/* A token (no '='), as [*start, *start + *n). */
static bool lex_token(struct lexer *x, const char **start, size_t *n) {
  const char *s = x->p;
  while (x->p < x->end && is_tchar(*x->p) && *x->p != '=')
    x->p++;
  *start = s;
  *n = (size_t)(x->p - s);
  return *n > 0;
}

/* A token or quoted-string value into buf (NUL-terminated). Returns 0, -1
 * malformed, -2 too long. */
static int lex_value(struct lexer *x, char *buf, size_t cap) {
  size_t k = 0;
  if (x->p < x->end && *x->p == '"') {
    x->p++;
    for (;;) {
      if (x->p >= x->end)
        return -1;
      char c = *x->p++;
      if (c == '"')
        break;
      if (c == '\\') {
        if (x->p >= x->end)
          return -1;
        c = *x->p++;
      }
      if ((unsigned char)c < 0x20 && c != '\t')
        return -1;
      if (k + 1 >= cap)
        return -2;
      buf[k++] = c;
    }
  } else {
    const char *s;
    size_t n;
    if (!lex_token(x, &s, &n))
      return -1;
    if (n >= cap)
      return -2;
    memcpy(buf, s, n);
    k = n;
  }
  buf[k] = '\0';
  return 0;
}

static int param(st_oci_challenge *c, const char *name, size_t nl, struct lexer *x,
                 st_error *err) {
  char *dst = NULL, skip[2048];
  size_t cap = sizeof skip;
  if (nl == 5 && !strncasecmp(name, "realm", 5))
    dst = c->realm, cap = sizeof c->realm;
  else if (nl == 7 && !strncasecmp(name, "service", 7))
    dst = c->service, cap = sizeof c->service;
  else if (nl == 5 && !strncasecmp(name, "scope", 5))
    dst = c->scope, cap = sizeof c->scope;
  else if (nl == 5 && !strncasecmp(name, "error", 5))
    dst = c->error, cap = sizeof c->error;
  int rc = lex_value(x, dst ? dst : skip, cap);
  if (rc == -2)
    return st_error_set(err, ST_ELIMIT, "authentication challenge: %.*s value too long",
                        (int)nl, name);
  if (rc < 0)
    return st_error_set(err, ST_EFORMAT, "authentication challenge: bad value of %.*s",
                        (int)nl, name);
  return ST_OK;
}

int st_oci_challenge_parse(st_oci_challenge *out, const char *value, size_t len, st_error *err) {
  st_oci_challenge c = {0};
  struct lexer x = {value, value + len};
  skip_ws(&x);
  const char *s;
  size_t n;
  if (!lex_token(&x, &s, &n))
    return st_error_set(err, ST_EFORMAT, "authentication challenge: no scheme");
  if (n == 5 && !strncasecmp(s, "Basic", 5))
    c.scheme = ST_OCI_AUTH_BASIC;
  else if (n == 6 && !strncasecmp(s, "Bearer", 6))
    c.scheme = ST_OCI_AUTH_BEARER;
  else
    return st_error_set(err, ST_EFORMAT, "authentication challenge: unsupported scheme '%.*s'",
                        (int)(n < 32 ? n : 32), s);
  for (bool first = true;; first = false) {
    skip_ws(&x);
    if (!first) {
      if (x.p >= x.end)
        break;
      if (*x.p != ',')
        return st_error_set(err, ST_EFORMAT, "authentication challenge: expected ','");
      x.p++;
      skip_ws(&x);
    }
    if (x.p >= x.end)
      break;
    const char *name;
    size_t nl;
    if (!lex_token(&x, &name, &nl))
      return st_error_set(err, ST_EFORMAT, "authentication challenge: expected a parameter");
    skip_ws(&x);
    if (x.p >= x.end || *x.p != '=')
      break; /* a token68, or the next challenge: only the first one is read */
    x.p++;
    skip_ws(&x);
    int rc = param(&c, name, nl, &x, err);
    if (rc < 0)
      return rc;
  }
  if (c.scheme == ST_OCI_AUTH_BEARER && !c.realm[0])
    return st_error_set(err, ST_EFORMAT, "authentication challenge: Bearer without realm");
  *out = c;
  return ST_OK;
}

/* ---- scopes ---- */

/* Splits one scope TYPE:NAME:ACTIONS (len bytes) at its first and last ':'. */
static bool scope_split(const char *s, size_t len, size_t *res_len, const char **actions,
                        size_t *act_len) {
  const char *first = memchr(s, ':', len);
  const char *last = NULL;
  for (const char *p = s + len; p > s; p--)
    if (p[-1] == ':') {
      last = p - 1;
      break;
    }
  if (!first || last == first || first == s || last == s + len - 1 || last - first < 2)
    return false;
  *res_len = (size_t)(last - s);
  *actions = last + 1;
  *act_len = (size_t)(s + len - *actions);
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] <= ' ' || s[i] == '"' || s[i] == 0x7f)
      return false;
  return true;
}

/* Whether list (comma-separated, NUL-terminated) holds action a (n bytes). */
static bool has_action(const char *list, const char *a, size_t n) {
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && !memcmp(p, a, n))
      return true;
    p += l + (e ? 1 : 0);
  }
  return false;
}

static int find_resource(const st_oci_scopes *set, const char *res, size_t n) {
  for (size_t i = 0; i < set->n; i++)
    if (strlen(set->s[i].resource) == n && !memcmp(set->s[i].resource, res, n))
      return (int)i;
  return -1;
}

/* Calls fn on each scope of text; stops at the first non-zero return. */
static int each_scope(const char *text, int (*fn)(void *, const char *, size_t, const char *,
                                                   size_t), void *ud) {
  for (const char *p = text; *p;) {
    while (*p == ' ')
      p++;
    if (!*p)
      break;
    size_t len = strcspn(p, " ");
    size_t res_len, act_len;
    const char *acts;
    if (!scope_split(p, len, &res_len, &acts, &act_len))
      return -1;
    int rc = fn(ud, p, res_len, acts, act_len);
    if (rc)
      return rc;
    p += len;
  }
  return 0;
}

struct add_ctx {
  st_oci_scopes *set;
  bool changed;
};

static int add_one(void *ud, const char *res, size_t res_len, const char *acts, size_t act_len) {
  struct add_ctx *a = ud;
  st_oci_scopes *set = a->set;
  int i = find_resource(set, res, res_len);
  if (i < 0) {
    if (set->n == ST_OCI_SCOPES_MAX || res_len >= sizeof set->s[0].resource)
      return -2;
    i = (int)set->n++;
    memcpy(set->s[i].resource, res, res_len);
    set->s[i].resource[res_len] = '\0';
    set->s[i].actions[0] = '\0';
    a->changed = true;
  }
  char *have = set->s[i].actions;
  for (const char *p = acts; p < acts + act_len;) {
    const char *e = memchr(p, ',', (size_t)(acts + act_len - p));
    size_t l = e ? (size_t)(e - p) : (size_t)(acts + act_len - p);
    if (l && !has_action(have, p, l)) {
      size_t hl = strlen(have);
      if (hl + l + 2 > sizeof set->s[0].actions)
        return -2;
      if (hl)
        have[hl++] = ',';
      memcpy(have + hl, p, l);
      have[hl + l] = '\0';
      a->changed = true;
    }
    p += l + 1;
  }
  return 0;
}

int st_oci_scopes_add(st_oci_scopes *set, const char *text, bool *changed, st_error *err) {
  struct add_ctx a = {set, false};
  int rc = each_scope(text, add_one, &a);
  if (changed)
    *changed = a.changed;
  if (rc == -1)
    return st_error_set(err, ST_EFORMAT, "scope '%.200s': expected TYPE:NAME:ACTIONS", text);
  if (rc == -2)
    return st_error_set(err, ST_ELIMIT, "scope '%.200s': too many or too long scopes", text);
  return ST_OK;
}

static int covered_one(void *ud, const char *res, size_t res_len, const char *acts,
                       size_t act_len) {
  const st_oci_scopes *set = ud;
  int i = find_resource(set, res, res_len);
  if (i < 0)
    return 1;
  for (const char *p = acts; p < acts + act_len;) {
    const char *e = memchr(p, ',', (size_t)(acts + act_len - p));
    size_t l = e ? (size_t)(e - p) : (size_t)(acts + act_len - p);
    if (l && !has_action(set->s[i].actions, p, l))
      return 1;
    p += l + 1;
  }
  return 0;
}

bool st_oci_scopes_cover(const st_oci_scopes *set, const char *text) {
  return each_scope(text, covered_one, (void *)set) == 0;
}

/* ---- the token exchange ---- */

int st_oci_token_parse(char **token_out, long *expires_out, const char *json, size_t len,
                       st_error *err) {
  json_error_t je;
  json_t *j = json_loadb(json, len, 0, &je);
  if (!j || !json_is_object(j)) {
    json_decref(j);
    return st_error_set(err, ST_EFORMAT, "token answer is not a JSON object");
  }
  json_t *t = json_object_get(j, "token");
  if (!json_is_string(t) || !json_string_length(t))
    t = json_object_get(j, "access_token");
  const char *s = json_is_string(t) ? json_string_value(t) : NULL;
  size_t n = s ? json_string_length(t) : 0;
  bool ok = n > 0 && n <= TOKEN_MAX;
  for (size_t i = 0; ok && i < n; i++)
    ok = s[i] > ' ' && s[i] < 0x7f;
  json_t *e = json_object_get(j, "expires_in");
  long expires = json_is_integer(e) && json_integer_value(e) > 0 &&
                         json_integer_value(e) < 100L * 365 * 86400
                     ? (long)json_integer_value(e) : 60;
  char *copy = ok ? strndup(s, n) : NULL;
  json_decref(j);
  if (!ok)
    return st_error_set(err, ST_EFORMAT, "token answer has no usable \"token\" or "
                        "\"access_token\"");
  if (!copy)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  *token_out = copy;
  *expires_out = expires;
  return ST_OK;
}

struct body {
  char *data;
  size_t len;
  bool over;
};

static size_t on_token_body(char *buf, size_t size, size_t n, void *ud) {
  struct body *b = ud;
  size_t len = size * n;
  if (b->len + len > TOKEN_BODY_MAX) {
    b->over = true;
    return 0; /* aborts the transfer */
  }
  char *p = realloc(b->data, b->len + len + 1);
  if (!p)
    return 0;
  memcpy(p + b->len, buf, len);
  b->len += len;
  p[b->len] = '\0';
  b->data = p;
  return len;
}

/* realm?service=S&scope=A&scope=B, escaped; malloc'd or NULL. */
static char *token_url(CURL *curl, const st_oci_challenge *c, const st_oci_scopes *set) {
  size_t cap = strlen(c->realm) + 3 * strlen(c->service) + 16;
  for (size_t i = 0; i < set->n; i++)
    cap += 3 * (strlen(set->s[i].resource) + strlen(set->s[i].actions)) + 16;
  char *url = malloc(cap);
  if (!url)
    return NULL;
  size_t k = (size_t)snprintf(url, cap, "%s", c->realm);
  char sep = strchr(c->realm, '?') ? '&' : '?';
  if (c->service[0]) {
    char *e = curl_easy_escape(curl, c->service, 0);
    if (!e)
      return free(url), NULL;
    k += (size_t)snprintf(url + k, cap - k, "%cservice=%s", sep, e);
    curl_free(e);
    sep = '&';
  }
  for (size_t i = 0; i < set->n; i++) {
    char scope[sizeof set->s[0].resource + sizeof set->s[0].actions + 1];
    snprintf(scope, sizeof scope, "%s:%s", set->s[i].resource, set->s[i].actions);
    char *e = curl_easy_escape(curl, scope, 0);
    if (!e)
      return free(url), NULL;
    k += (size_t)snprintf(url + k, cap - k, "%cscope=%s", sep, e);
    curl_free(e);
    sep = '&';
  }
  return url;
}

int st_oci_token_fetch(void *curl_handle, const st_oci_token_req *q, const st_oci_challenge *c,
                       const st_oci_scopes *set, char **token_out, long *expires_out,
                       st_error *err) {
  CURL *curl = curl_handle;
  if (strncmp(c->realm, "https://", 8) && strncmp(c->realm, "http://", 7))
    return st_error_set(err, ST_EFORMAT, "registry %s: token server '%.200s' is not an "
                        "http(s) URL", q->registry, c->realm);
  _cleanup_free_ char *url = token_url(curl, c, set);
  if (!url)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  struct body b = {0};
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, url);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_token_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "strata");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 120L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  if (q->ca_file)
    curl_easy_setopt(curl, CURLOPT_CAINFO, q->ca_file);
  if (q->user) {
    curl_easy_setopt(curl, CURLOPT_USERNAME, q->user);
    curl_easy_setopt(curl, CURLOPT_PASSWORD, q->password ? q->password : "");
    curl_easy_setopt(curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
  }
  CURLcode cc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  int rc = ST_OK;
  if (b.over)
    rc = st_error_set(err, ST_ELIMIT, "registry %s: token server %.200s: answer over %u bytes",
                      q->registry, c->realm, TOKEN_BODY_MAX);
  else if (cc != CURLE_OK)
    rc = st_error_set(err, ST_EUNAVAIL, "registry %s: token server %.200s: %s", q->registry,
                      c->realm, curl_easy_strerror(cc));
  else if (status == 401 || status == 403)
    rc = st_error_set(err, ST_EAUTH, "registry %s: token server %.200s: HTTP %ld (%s)",
                      q->registry, c->realm, status,
                      q->user ? "wrong user name or password" : "credentials needed");
  else if (status != 200)
    rc = st_error_set(err, ST_EUNAVAIL, "registry %s: token server %.200s: HTTP %ld",
                      q->registry, c->realm, status);
  else if (st_oci_token_parse(token_out, expires_out, b.data ? b.data : "", b.len, err) < 0)
    rc = st_error_prefix(err, "registry %s: token server %.200s", q->registry, c->realm);
  free(b.data);
  return rc;
}
