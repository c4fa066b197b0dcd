/* SPDX-License-Identifier: Apache-2.0 */
/* strata publish IMAGE --oci DIR[:TAG] | --registry HOST[:PORT]/REPO:TAG */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "image.h"
#include "oci.h"
#include "progress.h"

static const char usage[] =
    "strata publish [--store DIR] [-j N] IMAGE (--oci DIR[:TAG] | --registry "
    "HOST[:PORT]/REPO:TAG) [--zstd]\n"
    "  --oci DIR[:TAG]        write an OCI image layout\n"
    "  --registry HOST[:PORT]/REPO:TAG\n"
    "                         push over the OCI distribution API (HTTPS)\n"
    "  --zstd                 tar+zstd layers (default tar+gzip)\n"
    "  -j N                   layers made and gzip blocks compressed on N threads\n"
    "registry options:\n"
    "  --insecure             plain HTTP (a registry on loopback)\n"
    "  --tls-ca FILE          trust the CA certificates in FILE (PEM) for HTTPS\n"
    "  --username USER        user for Basic auth, or for the token server of a registry\n"
    "                         that asks for a Bearer token (env STRATA_REGISTRY_USER)\n"
    "  --password-stdin       read the password from the first line of stdin\n"
    "                         (else env STRATA_REGISTRY_PASSWORD; never an argument)\n"
    "  --token TOKEN          a bearer token obtained beforehand (env STRATA_REGISTRY_TOKEN)";

struct pub_args {
  const char *oci, *registry, *user, *token, *ca;
  bool zstd, insecure, password_stdin, password_arg;
};

static int pub_opt(int c, const char *arg, void *ud) {
  struct pub_args *a = ud;
  switch (c) {
  case 'o': a->oci = arg; return 0;
  case 'r': a->registry = arg; return 0;
  case 'u': a->user = arg; return 0;
  case 'P': a->password_stdin = true; return 0;
  case 'p': a->password_arg = true; return 0;
  case 't': a->token = arg; return 0;
  case 'c': a->ca = arg; return 0;
  case 'z': a->zstd = true; return 0;
  case 'k': a->insecure = true; return 0;
  default: return -1;
  }
}

#define PASSWORD_MAX 4096

/* The first line of stdin (without its newline), malloc'd; NULL on a read
 * error or a line over PASSWORD_MAX. */
static char *read_password(void) {
  char *buf = malloc(PASSWORD_MAX + 2);
  if (!buf)
    return NULL;
  size_t n = 0;
  int ch;
  while ((ch = getchar()) != EOF && ch != '\n' && n <= PASSWORD_MAX)
    buf[n++] = (char)ch;
  if (ferror(stdin) || n > PASSWORD_MAX) {
    explicit_bzero(buf, PASSWORD_MAX + 2);
    free(buf);
    return NULL;
  }
  if (n && buf[n - 1] == '\r')
    n--;
  buf[n] = '\0';
  return buf;
}

/* Fills the credentials of a from the options, stdin and the environment.
 * Returns 0, or a usage error's exit code. *password_owned gets a password
 * read from stdin. */
static int credentials(struct pub_args *a, const char **password, char **password_owned) {
  if (a->password_arg)
    return cli_usage_error(usage, "--password PASS is not accepted (it would show in the "
                           "process list): use --password-stdin or STRATA_REGISTRY_PASSWORD");
  if (!a->user)
    a->user = getenv("STRATA_REGISTRY_USER");
  if (a->user && !*a->user)
    a->user = NULL;
  if (!a->token)
    a->token = getenv("STRATA_REGISTRY_TOKEN");
  if (a->token && !*a->token)
    a->token = NULL;
  if (a->password_stdin && !a->user)
    return cli_usage_error(usage, "--password-stdin needs --username");
  if (a->password_stdin) {
    if (!(*password_owned = read_password()))
      return cli_usage_error(usage, "--password-stdin: no password line of at most %d bytes "
                             "on stdin", PASSWORD_MAX);
    *password = *password_owned;
  } else if (a->user) {
    *password = getenv("STRATA_REGISTRY_PASSWORD");
  }
  if (a->user && a->token)
    return cli_usage_error(usage, "give either --username or --token");
  return 0;
}

static void free_password(char **p) {
  if (*p) {
    explicit_bzero(*p, strlen(*p));
    free(*p);
  }
}

static bool tag_ok(const char *t) {
  size_t n = strlen(t);
  return n >= 1 && n <= 128 && !strchr(".-", t[0]) &&
         strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

/* DIR[:TAG]: a ':' after the last '/' starts the tag; default: the image's
 * tag when IMAGE is NAME:TAG, else "latest". */
static int split_oci(const char *spec, const char *image, char **dir, char **tag) {
  const char *slash = strrchr(spec, '/');
  const char *colon = strrchr(slash ? slash : spec, ':');
  const char *itag = strncmp(image, "sha256:", 7) ? strrchr(image, ':') : NULL;
  *dir = colon ? strndup(spec, (size_t)(colon - spec)) : strdup(spec);
  *tag = strdup(colon ? colon + 1 : itag ? itag + 1 : "latest");
  if (!*dir || !*tag)
    return -1;
  return **dir && tag_ok(*tag) ? 0 : 1;
}

int cmd_publish(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {
      {"oci", required_argument, NULL, 'o'},        {"registry", required_argument, NULL, 'r'},
      {"username", required_argument, NULL, 'u'},   {"password-stdin", no_argument, NULL, 'P'},
      {"password", required_argument, NULL, 'p'},   {"token", required_argument, NULL, 't'},
      {"tls-ca", required_argument, NULL, 'c'},     {"zstd", no_argument, NULL, 'z'},
      {"insecure", no_argument, NULL, 'k'},         CLI_COMMON_LONGOPTS};
  struct pub_args a = {0};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, pub_opt, &a);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(usage, "expected one image");
  if (!a.oci == !a.registry)
    return cli_usage_error(usage, "give exactly one of --oci and --registry");
  if (a.oci && (a.user || a.token || a.insecure || a.ca || a.password_stdin || a.password_arg))
    return cli_usage_error(usage, "--username, --password-stdin, --token, --tls-ca and "
                           "--insecure apply to --registry");
  const char *password = NULL;
  _cleanup_(free_password) char *password_owned = NULL;
  if (a.registry && (rc = credentials(&a, &password, &password_owned)))
    return rc;
  const char *image = argv[optind];
  _cleanup_free_ char *dir = NULL, *tag = NULL;
  if (a.oci) {
    int r = split_oci(a.oci, image, &dir, &tag);
    if (r < 0)
      return cli_usage_error(usage, "out of memory");
    if (r > 0)
      return cli_usage_error(usage, "--oci '%s': expected DIR[:TAG] with a tag of "
                             "[A-Za-z0-9_][A-Za-z0-9._-]*", a.oci);
  }
  st_store *s = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)))
    return rc;
  st_error err = {0};
  st_digest d;
  st_image *img = NULL;
  st_oci_publish_opts po = {
      .compression = a.zstd ? ST_OCI_ZSTD : ST_OCI_GZIP,
      .threads = cli_threads(ctx),
      .progress = !ctx->quiet && st_progress_wanted(),
      .insecure = a.insecure, .user = a.user, .password = password, .token = a.token,
      .ca_file = a.ca,
  };
  st_oci_publish_result res = {0};
  if (st_image_resolve(s, image, &d, &err) < 0 || st_image_load(&img, s, &d, &err) < 0)
    rc = cli_fail(&err);
  else if (a.oci && st_oci_publish_layout(s, img, dir, tag, &po, &res, &err) < 0)
    rc = cli_fail(&err);
  else if (a.registry && st_oci_publish_registry(s, img, a.registry, &po, &res, &err) < 0)
    rc = cli_fail(&err);
  if (rc == CLI_EXIT_OK) {
    char hex[ST_DIGEST_HEX_LEN + 1], b[16];
    if (!ctx->quiet && a.oci)
      fprintf(stderr, "published %s to oci:%s:%s: %zu layers (%zu made, %zu already there), "
              "%s compressed\n", image, dir, tag, res.layers, res.layers_made,
              res.layers - res.layers_made, st_format_bytes(res.bytes_total, b, sizeof b));
    if (!ctx->quiet && a.registry)
      fprintf(stderr, "pushed %s to %s: %zu layers (%zu made), uploaded %zu blobs, "
              "%llu layer bytes uploaded of %llu\n", image, a.registry, res.layers,
              res.layers_made, res.blobs_uploaded, (unsigned long long)res.layer_bytes_uploaded,
              (unsigned long long)res.bytes_total);
    printf("sha256:%s\n", st_digest_hex(&res.manifest, hex));
  }
  st_image_free(img);
  st_store_free(s);
  return rc;
}
