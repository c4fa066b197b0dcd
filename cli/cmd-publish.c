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
    "HOST[:PORT]/REPO:TAG [--insecure] [--user USER --password PASS | --token TOKEN]) [--zstd]";

struct pub_args {
  const char *oci, *registry, *user, *password, *token;
  bool zstd, insecure;
};

static int pub_opt(int c, const char *arg, void *ud) {
  struct pub_args *a = ud;
  switch (c) {
  case 'o': a->oci = arg; return 0;
  case 'r': a->registry = arg; return 0;
  case 'u': a->user = arg; return 0;
  case 'p': a->password = arg; return 0;
  case 't': a->token = arg; return 0;
  case 'z': a->zstd = true; return 0;
  case 'k': a->insecure = true; return 0;
  default: return -1;
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
      {"oci", required_argument, NULL, 'o'},      {"registry", required_argument, NULL, 'r'},
      {"user", required_argument, NULL, 'u'},     {"password", required_argument, NULL, 'p'},
      {"token", required_argument, NULL, 't'},    {"zstd", no_argument, NULL, 'z'},
      {"insecure", no_argument, NULL, 'k'},       CLI_COMMON_LONGOPTS};
  struct pub_args a = {0};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, pub_opt, &a);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(usage, "expected one image");
  if (!a.oci == !a.registry)
    return cli_usage_error(usage, "give exactly one of --oci and --registry");
  if (!a.password)
    a.password = getenv("STRATA_REGISTRY_PASSWORD");
  if (!a.token)
    a.token = getenv("STRATA_REGISTRY_TOKEN");
  if (a.oci && (a.user || a.token || a.insecure))
    return cli_usage_error(usage, "--user, --token and --insecure apply to --registry");
  if (a.user && a.token)
    return cli_usage_error(usage, "give either --user/--password or --token");
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
      .insecure = a.insecure, .user = a.user, .password = a.password, .token = a.token,
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
