/* SPDX-License-Identifier: Apache-2.0 */
/* strata store init | fsck | stats */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "cli.h"
#include "progress.h"
#include "store-check.h"


static const char init_usage[] =
    "strata store init [--store DIR] [--chunk-min N] [--chunk-avg N] [--chunk-max N] [--level N]";
static const char fsck_usage[] = "strata store fsck [--store DIR] [-j N]";
static const char stats_usage[] = "strata store stats [--store DIR]";

static int parse_common_only(cli_ctx *ctx, int argc, char **argv, const char *usage) {
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, NULL, NULL);
  if (rc == CLI_EXIT_OK && optind != argc)
    return cli_usage_error(usage, "unexpected argument '%s'", argv[optind]);
  return rc;
}

static int store_init(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"chunk-min", required_argument, NULL, 'm'},
                                       {"chunk-avg", required_argument, NULL, 'a'},
                                       {"chunk-max", required_argument, NULL, 'x'},
                                       {"level", required_argument, NULL, 'l'},
                                       CLI_COMMON_LONGOPTS};
  st_store_config cfg = st_store_config_default();
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS, opts, NULL)) != -1) {
    uint64_t v = 0;
    if (c == 'h') {
      printf("usage: %s\n", init_usage);
      return CLI_EXIT_OK;
    }
    if (strchr("maxl", c) && (cli_parse_size(optarg, &v) < 0 || v > UINT32_MAX))
      return cli_usage_error(init_usage, "invalid number '%s'", optarg);
    switch (c) {
    case 'm': cfg.chunking.min = (uint32_t)v; break;
    case 'a': cfg.chunking.avg = (uint32_t)v; break;
    case 'x': cfg.chunking.max = (uint32_t)v; break;
    case 'l': cfg.zstd_level = (int)v; break;
    default: {
      int r = cli_common_opt(ctx, c, optarg);
      if (r <= 0)
        return r < 0 ? CLI_EXIT_USAGE : cli_usage_error(init_usage, "unknown option");
    }
    }
  }
  if (optind != argc)
    return cli_usage_error(init_usage, "unexpected argument '%s'", argv[optind]);
  st_error err = {0};
  if (cfg.zstd_level < 1 || cfg.zstd_level > 19)
    return cli_usage_error(init_usage, "--level must be within 1..19");
  if (st_store_init(cli_store_path(ctx), &cfg, &err) < 0)
    return cli_fail(&err);
  if (!ctx->quiet)
    fprintf(stderr, "initialised store %s (chunks %u/%u/%u, zstd level %d)\n",
            cli_store_path(ctx), cfg.chunking.min, cfg.chunking.avg, cfg.chunking.max,
            cfg.zstd_level);
  return CLI_EXIT_OK;
}

static void print_problem(const st_error *problem, void *ud) {
  printf("BAD %s\n", problem->msg);
  fflush(stdout);
}

static int store_fsck(cli_ctx *ctx, int argc, char **argv) {
  int rc = parse_common_only(ctx, argc, argv, fsck_usage);
  if (rc)
    return rc;
  _cleanup_(st_store_freep) st_store *s = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)))
    return rc;
  st_fsck_result res;
  st_error err = {0};
  rc = st_store_fsck(s, cli_threads(ctx), print_problem, NULL, &res, &err);
  if (rc < 0 && rc != ST_ECORRUPT)
    return cli_fail(&err);
  if (rc == ST_ECORRUPT)
    fprintf(stderr, "strata: error: store %s: %s\n", cli_store_path(ctx), err.msg);
  printf("checked %llu chunks, %llu indexes, %llu manifests: %s\n",
         (unsigned long long)res.objects[ST_KIND_CHUNK],
         (unsigned long long)res.objects[ST_KIND_INDEX],
         (unsigned long long)res.objects[ST_KIND_MANIFEST], rc == ST_OK ? "ok" : err.msg);
  return rc == ST_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

static int store_stats(cli_ctx *ctx, int argc, char **argv) {
  int rc = parse_common_only(ctx, argc, argv, stats_usage);
  if (rc)
    return rc;
  _cleanup_(st_store_freep) st_store *s = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)))
    return rc;
  st_store_stats st;
  st_error err = {0};
  if (st_store_stats_get(s, &st, &err) < 0)
    return cli_fail(&err);
  uint64_t objects = 0, stored = 0;
  for (int k = 0; k < ST_KIND_COUNT; k++) {
    objects += st.objects[k];
    stored += st.stored_bytes[k];
  }
  char a[16], b[16], c[16];
  printf("store           %s\n", cli_store_path(ctx));
  printf("objects         %llu (%llu chunks, %llu layer indexes, %llu manifests)\n",
         (unsigned long long)objects, (unsigned long long)st.objects[ST_KIND_CHUNK],
         (unsigned long long)st.objects[ST_KIND_INDEX],
         (unsigned long long)st.objects[ST_KIND_MANIFEST]);
  printf("bytes stored    %llu (%s)\n", (unsigned long long)stored,
         st_format_bytes(stored, a, sizeof a));
  printf("bytes logical   %llu (%s unique chunk data, %s referenced by %llu layers)\n",
         (unsigned long long)st.logical_referenced,
         st_format_bytes(st.logical_unique, b, sizeof b),
         st_format_bytes(st.logical_referenced, c, sizeof c), (unsigned long long)st.layers);
  printf("dedup ratio     %.2f\n",
         st.logical_unique ? (double)st.logical_referenced / (double)st.logical_unique : 1.0);
  printf("compression     %.2f\n",
         st.stored_bytes[ST_KIND_CHUNK]
             ? (double)st.logical_unique / (double)st.stored_bytes[ST_KIND_CHUNK]
             : 1.0);
  return CLI_EXIT_OK;
}

int cmd_store(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata store init|fsck|stats [--store DIR]";
  if (argc < 2)
    return cli_usage_error(usage, "missing subcommand");
  const char *sub = argv[1];
  if (!strcmp(sub, "init"))
    return store_init(ctx, argc - 1, argv + 1);
  if (!strcmp(sub, "fsck"))
    return store_fsck(ctx, argc - 1, argv + 1);
  if (!strcmp(sub, "stats"))
    return store_stats(ctx, argc - 1, argv + 1);
  return cli_usage_error(usage, "unknown subcommand '%s'", sub);
}
