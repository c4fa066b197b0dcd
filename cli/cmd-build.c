/* SPDX-License-Identifier: Apache-2.0 */
/* strata build | plan | images | inspect | tag | rmi | export */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "cleanup.h"
#include "cli.h"
#include "compose.h"
#include "fs.h"
#include "image.h"
#include "progress.h"
#include "recipe.h"
#include "unpack.h"

static const char build_usage[] = "strata build [--store DIR] [-j N] [--cell K=V,...] RECIPE";
static const char plan_usage[] = "strata plan [--store DIR] [--cell K=V,...] RECIPE";


static void on_event(const st_build_event *ev, void *ud) {
  const cli_ctx *ctx = ud;
  char hex[ST_DIGEST_HEX_LEN + 1], a[16], b[16];
  switch (ev->kind) {
  case ST_BUILD_EV_BUILDING:
    if (!ctx->quiet)
      fprintf(stderr, "  [%zu/%zu] %-12s building...\n", ev->index + 1, ev->count, ev->layer);
    break;
  case ST_BUILD_EV_CACHED:
  case ST_BUILD_EV_BUILT:
    printf("  [%zu/%zu] %-12s %-6s %10s  %6.2f s  sha256:%.12s", ev->index + 1, ev->count,
           ev->layer, ev->kind == ST_BUILD_EV_CACHED ? "cached" : "built",
           st_format_bytes(ev->bytes, a, sizeof a), ev->seconds, st_digest_hex(&ev->digest, hex));
    if (ev->kind == ST_BUILD_EV_BUILT)
      printf("  (+%s stored)", st_format_bytes(ev->bytes_new, b, sizeof b));
    putchar('\n');
    break;
  case ST_BUILD_EV_PLAN:
    printf("  [%zu/%zu] %-12s key sha256:%.16s  %s\n", ev->index + 1, ev->count, ev->layer,
           st_digest_hex(&ev->key, hex), ev->cached ? "cached" : "to build");
    break;
  case ST_BUILD_EV_LOG:
    if (!ctx->quiet)
      fprintf(stderr, "    %s| %s\n", ev->layer, ev->line);
    break;
  case ST_BUILD_EV_IMAGE:
    printf("%s sha256:%s\n", ev->ref, st_digest_hex(&ev->digest, hex));
    break;
  }
  fflush(stdout);
}

struct build_args {
  const char *cell;
};

static int cell_opt(int c, const char *arg, void *ud) {
  if (c != 'c')
    return -1;
  ((struct build_args *)ud)->cell = arg;
  return 0;
}

/* Recipe problems are the user's input: exit 2, one line. */
static int recipe_fail(const st_error *err) {
  fprintf(stderr, "strata: error: %s\n", err->msg);
  return CLI_EXIT_USAGE;
}

static int build_or_plan(cli_ctx *ctx, int argc, char **argv, bool dry_run) {
  static const struct option opts[] = {{"cell", required_argument, NULL, 'c'},
                                       CLI_COMMON_LONGOPTS};
  const char *usage = dry_run ? plan_usage : build_usage;
  struct build_args ba = {0};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, cell_opt, &ba);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(usage, "expected one recipe file");
  st_error err = {0};
  st_recipe *r = NULL;
  if (st_recipe_load(&r, argv[optind], &err) < 0)
    return recipe_fail(&err);
  st_cell_filter *filter = NULL;
  if (ba.cell && st_recipe_cell_filter_parse(r, ba.cell, &filter, &err) < 0) {
    st_recipe_free(r);
    return recipe_fail(&err);
  }
  st_cell *cells = NULL;
  size_t n_cells = 0;
  st_store *s = NULL;
  rc = st_recipe_cells(r, &cells, &n_cells, &err) < 0 ? cli_fail(&err) : CLI_EXIT_OK;
  if (rc == CLI_EXIT_OK)
    rc = cli_open_store(ctx, ST_STORE_CREATE, &s);
  st_build_opts bo = {.threads = cli_threads(ctx), .mtime = cli_source_date_epoch(),
                      .dry_run = dry_run, .on_event = on_event, .ud = ctx};
  double t0 = st_now();
  size_t built = 0;
  for (size_t i = 0; i < n_cells && rc == CLI_EXIT_OK; i++) {
    if (!st_cell_matches(filter, &cells[i]))
      continue;
    st_recipe_instance *ri = NULL;
    if (st_recipe_instantiate(r, &cells[i], &ri, &err) < 0) {
      rc = err.code == ST_ENOMEM ? cli_fail(&err) : recipe_fail(&err);
      break;
    }
    printf("%s%s%s%s\n", ri->ref, ri->cell_name[0] ? " (" : "", ri->cell_name,
           ri->cell_name[0] ? ")" : "");
    if (st_build_instance(s, ri, &bo, NULL, &err) < 0)
      rc = cli_fail(&err);
    st_recipe_instance_free(ri);
    built++;
  }
  if (rc == CLI_EXIT_OK && built == 0)
    rc = cli_usage_error(usage, "--cell %s matches no cell of the recipe", ba.cell);
  if (rc == CLI_EXIT_OK && !ctx->quiet && !dry_run)
    fprintf(stderr, "%zu image%s in %.2f s\n", built, built == 1 ? "" : "s", st_now() - t0);
  st_store_free(s);
  st_cells_free(cells, n_cells);
  st_cell_filter_free(filter);
  st_recipe_free(r);
  return rc;
}

static int print_image(const char *name, const char *tag, const st_digest *d, void *ud) {
  st_store *s = ud;
  char hex[ST_DIGEST_HEX_LEN + 1], a[16];
  st_image *img = NULL;
  uint64_t size = 0;
  size_t layers = 0;
  if (st_image_load(&img, s, d, NULL) == ST_OK) {
    for (size_t i = 0; i < img->n_layers; i++)
      size += img->layers[i].size;
    layers = img->n_layers;
  }
  char ref[300];
  snprintf(ref, sizeof ref, "%s:%s", name, tag);
  printf("%-40s sha256:%.12s  %2zu layers  %10s\n", ref, st_digest_hex(d, hex), layers,
         st_format_bytes(size, a, sizeof a));
  st_image_free(img);
  return 0;
}

int cmd_build(cli_ctx *ctx, int argc, char **argv) { return build_or_plan(ctx, argc, argv, false); }
int cmd_plan(cli_ctx *ctx, int argc, char **argv) { return build_or_plan(ctx, argc, argv, true); }

static int open_and_resolve(cli_ctx *ctx, const char *ref, st_store **s, st_digest *d) {
  int rc = cli_open_store(ctx, 0, s);
  if (rc)
    return rc;
  st_error err = {0};
  if (st_image_resolve(*s, ref, d, &err) < 0)
    return cli_fail(&err);
  return CLI_EXIT_OK;
}

int cmd_images(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata images [--store DIR]";
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, NULL, NULL);
  if (rc)
    return rc;
  if (optind != argc)
    return cli_usage_error(usage, "unexpected argument '%s'", argv[optind]);
  st_store *s = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)))
    return rc;
  st_error err = {0};
  printf("%-40s %-19s %9s  %10s\n", "IMAGE", "DIGEST", "LAYERS", "SIZE");
  if (st_tag_list(s, print_image, s, &err) < 0)
    rc = cli_fail(&err);
  st_store_free(s);
  return rc;
}

int cmd_inspect(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata inspect [--store DIR] IMAGE";
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, NULL, NULL);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(usage, "expected one image (NAME:TAG or sha256:DIGEST)");
  st_store *s = NULL;
  st_digest d;
  if ((rc = open_and_resolve(ctx, argv[optind], &s, &d))) {
    st_store_free(s);
    return rc;
  }
  st_error err = {0};
  st_image *img = NULL;
  if (st_image_load(&img, s, &d, &err) < 0) {
    st_store_free(s);
    return cli_fail(&err);
  }
  char hex[ST_DIGEST_HEX_LEN + 1], a[16];
  uint64_t total = 0;
  printf("image     %s\ndigest    sha256:%s\nlayers\n", argv[optind], st_digest_hex(&d, hex));
  for (size_t i = 0; i < img->n_layers; i++) {
    total += img->layers[i].size;
    printf("  %-12s sha256:%s  %10s\n", img->layers[i].name,
           st_digest_hex(&img->layers[i].digest, hex),
           st_format_bytes(img->layers[i].size, a, sizeof a));
  }
  printf("size      %s\n", st_format_bytes(total, a, sizeof a));
  printf("workdir   %s\nentrypoint", img->workdir ? img->workdir : "(none)");
  for (size_t i = 0; i < img->n_entrypoint; i++)
    printf(" %s", img->entrypoint[i]);
  printf("\nenv\n");
  for (size_t i = 0; i < img->n_env; i++)
    printf("  %s=%s\n", img->env[i].key, img->env[i].value);
  printf("labels\n");
  for (size_t i = 0; i < img->n_labels; i++)
    printf("  %s=%s\n", img->labels[i].key, img->labels[i].value);
  st_image_free(img);
  st_store_free(s);
  return CLI_EXIT_OK;
}

int cmd_tag(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata tag [--store DIR] SOURCE_IMAGE NAME:TAG";
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, NULL, NULL);
  if (rc)
    return rc;
  if (argc - optind != 2)
    return cli_usage_error(usage, "expected a source image and a new NAME:TAG");
  st_store *s = NULL;
  st_digest d;
  st_error err = {0};
  char *name = NULL, *tag = NULL;
  if ((rc = open_and_resolve(ctx, argv[optind], &s, &d)) == CLI_EXIT_OK) {
    if (st_image_ref_parse(argv[optind + 1], &name, &tag, &err) < 0)
      rc = cli_usage_error(usage, "%s", err.msg);
    else if (st_tag_set(s, name, tag, &d, &err) < 0)
      rc = cli_fail(&err);
  }
  free(name);
  free(tag);
  st_store_free(s);
  return rc;
}

int cmd_rmi(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata rmi [--store DIR] NAME:TAG...";
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, NULL, NULL);
  if (rc)
    return rc;
  if (argc - optind < 1)
    return cli_usage_error(usage, "expected at least one NAME:TAG");
  st_store *s = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)))
    return rc;
  for (int i = optind; i < argc && rc == CLI_EXIT_OK; i++) {
    st_error err = {0};
    char *name = NULL, *tag = NULL;
    if (st_image_ref_parse(argv[i], &name, &tag, &err) < 0 ||
        st_tag_delete(s, name, tag, &err) < 0)
      rc = cli_fail(&err);
    else if (!ctx->quiet)
      fprintf(stderr, "untagged %s (its layers stay until garbage collection)\n", argv[i]);
    free(name);
    free(tag);
  }
  st_store_free(s);
  return rc;
}

int cmd_export(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata export [--store DIR] [-j N] IMAGE DIR";
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, NULL, NULL);
  if (rc)
    return rc;
  if (argc - optind != 2)
    return cli_usage_error(usage, "expected an image and a destination directory");
  st_store *s = NULL;
  st_digest d;
  st_error err = {0};
  st_image *img = NULL;
  st_layer_index *merged = NULL;
  if ((rc = open_and_resolve(ctx, argv[optind], &s, &d)) == CLI_EXIT_OK &&
      st_image_load(&img, s, &d, &err) < 0)
    rc = cli_fail(&err);
  st_digest *layers = img ? calloc(img->n_layers + 1, sizeof *layers) : NULL;
  for (size_t i = 0; layers && i < img->n_layers; i++)
    layers[i] = img->layers[i].digest;
  if (rc == CLI_EXIT_OK && st_compose(s, layers, img->n_layers, &merged, &err) < 0)
    rc = cli_fail(&err);
  if (rc == CLI_EXIT_OK) {
    st_unpack_opts uo = st_unpack_opts_default();
    uo.threads = cli_threads(ctx);
    st_unpack_stats us;
    double t0 = st_now();
    if (st_layer_unpack(s, merged, argv[optind + 1], &uo, &us, &err) < 0)
      rc = cli_fail(&err);
    else if (!ctx->quiet)
      fprintf(stderr, "exported %s to %s: %llu files in %.2f s\n", argv[optind], argv[optind + 1],
              (unsigned long long)us.files, st_now() - t0);
  }
  free(layers);
  st_layer_index_free(merged);
  st_image_free(img);
  st_store_free(s);
  return rc;
}
