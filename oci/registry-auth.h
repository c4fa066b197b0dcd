/* SPDX-License-Identifier: Apache-2.0 */
/* Private to oci/registry.c, oci/registry-auth.c and their tests: the
 * registry's authentication challenges (WWW-Authenticate), the scopes a
 * bearer token is asked for, and the token exchange of the distribution
 * token protocol (GET realm?service=..&scope=.. → {"token": ...}). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

typedef enum { ST_OCI_AUTH_NONE = 0, ST_OCI_AUTH_BASIC, ST_OCI_AUTH_BEARER } st_oci_auth_scheme;

/* One challenge: `Basic realm="R"` or `Bearer realm="R",service="S",scope="A B"`. */
typedef struct {
  st_oci_auth_scheme scheme;
  char realm[1024];
  char service[256];
  char scope[1024]; /* space-separated scopes, "" if none given */
  char error[64];   /* e.g. "insufficient_scope", "" if none */
} st_oci_challenge;

/* Parses the value of one WWW-Authenticate header (len bytes, no NUL
 * needed): the first challenge whose scheme is Basic or Bearer (case-
 * insensitive) with its parameters; unknown parameters are skipped. *out
 * is written on success. ST_EFORMAT (malformed, another scheme, a Bearer
 * challenge without realm), ST_ELIMIT (a value longer than its field). */
int st_oci_challenge_parse(st_oci_challenge *out, const char *value, size_t len, st_error *err);

#define ST_OCI_SCOPES_MAX 8

/* The resources a token is asked for, each with the union of its actions. */
typedef struct {
  struct {
    char resource[400]; /* TYPE:NAME */
    char actions[128];  /* ACTION[,ACTION...] */
  } s[ST_OCI_SCOPES_MAX];
  size_t n;
} st_oci_scopes;

/* Adds the space-separated scopes of text (TYPE:NAME:ACTION[,ACTION...]; a
 * NAME may hold ':') to set, merging the actions of a resource already
 * there. *changed (nullable) tells whether the set grew. ST_EFORMAT,
 * ST_ELIMIT (more than ST_OCI_SCOPES_MAX resources or too long); on error
 * set may hold the scopes before the bad one. */
int st_oci_scopes_add(st_oci_scopes *set, const char *text, bool *changed, st_error *err);

/* Whether every action of every scope of text is in set. False for a
 * malformed text. */
bool st_oci_scopes_cover(const st_oci_scopes *set, const char *text);

/* The token of a token server's JSON answer: "token", else "access_token"
 * (a non-empty string of printable ASCII without spaces, at most 16 KiB).
 * *token_out (malloc'd) and *expires_out (seconds, "expires_in", 60 when
 * absent) are written on success. ST_EFORMAT otherwise. */
int st_oci_token_parse(char **token_out, long *expires_out, const char *json, size_t len,
                       st_error *err);

/* Where the token server is and how to reach it. */
typedef struct {
  const char *registry; /* base URL, for messages */
  const char *user, *password; /* nullable: basic credentials for the token server */
  const char *ca_file;  /* nullable: CA bundle (CURLOPT_CAINFO) */
} st_oci_token_req;

/* GET c->realm?service=..&scope=.. (one scope parameter per resource of
 * set) with curl (reset first, left reset-able); *token_out malloc'd.
 * Errors are one line naming the registry and the token server: ST_EAUTH
 * (HTTP 401/403), ST_EUNAVAIL (unreachable, other status), ST_EFORMAT (no
 * token in the answer). */
int st_oci_token_fetch(void *curl, const st_oci_token_req *q, const st_oci_challenge *c,
                       const st_oci_scopes *set, char **token_out, long *expires_out,
                       st_error *err);
