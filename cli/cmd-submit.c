/* SPDX-License-Identifier: Apache-2.0 */
/* strata submit | builds | cancel: builds on a server (docs/BUILDS.md). submit packs the
 * files the recipe reads into a build context in the local store, sends the chunks the
 * server lacks, submits, and follows the build to its end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "cli.h"
#include "client.h"
#include "context.h"
#include "fs.h"
#include "progress.h"
#include "queue.h"

enum { OPT_CELL = 1100, OPT_DETACH };

struct submit_args {
  cli_remote_opts ro;
  const char *cell;
  bool detach;
};

static int submit_opt(int c, const char *arg, void *ud) {
  struct submit_args *a = ud;
  if (c == OPT_CELL) {
    a->cell = arg;
    return 0;
  }
  if (c == OPT_DETACH) {
    a->detach = true;
    return 0;
  }
  int r = cli_remote_opt(&a->ro, c, arg);
  if (r < 0)
    exit(CLI_EXIT_USAGE);
  return r;
}

/* What the watch has printed so far (a re-watch after a deadline replays the history). */
struct watch_out {
  bool quiet;
  size_t seen, skip; /* events delivered; events to skip (already printed) */
  st_build_state state;
  bool have_state;
  char layer[128];   /* the layer that is running, for log lines */
};

static int on_watch(const st_build_info *info, const st_bevent *ev, void *ud) {
  struct watch_out *w = ud;
  if (info) {
    if ((!w->have_state || info->state != w->state) && !w->quiet)
      fprintf(stderr, "build %s\n", st_build_state_name(info->state));
    w->state = info->state;
    w->have_state = true;
    return 0;
  }
  if (w->seen++ < w->skip)
    return 0;
  char hex[ST_DIGEST_HEX_LEN + 1], a[16];
  if (ev->kind == ST_BEV_LOG) {
    if (!w->quiet)
      fprintf(stderr, "    %s| %s\n", w->layer, ev->text);
    return 0;
  }
  switch (ev->layer_state) {
  case ST_LAYER_RUNNING:
    snprintf(w->layer, sizeof w->layer, "%s", ev->layer);
    if (!w->quiet)
      fprintf(stderr, "  [%u/%u] %-12s building...%s%s%s\n", ev->index + 1, ev->count,
              ev->layer, ev->cell[0] ? " (" : "", ev->cell, ev->cell[0] ? ")" : "");
    break;
  case ST_LAYER_CACHED:
  case ST_LAYER_DONE:
    printf("  [%u/%u] %-12s %-6s %10s  %6.2f s  sha256:%.12s\n", ev->index + 1, ev->count,
           ev->layer, ev->layer_state == ST_LAYER_CACHED ? "cached" : "built",
           st_format_bytes(ev->bytes, a, sizeof a), ev->seconds,
           st_digest_hex(&ev->digest, hex));
    break;
  case ST_LAYER_FAILED:
    printf("  [%u/%u] %-12s failed: %s\n", ev->index + 1, ev->count, ev->layer,
           ev->text ? ev->text : "");
    break;
  default:
    break;
  }
  fflush(stdout);
  return 0;
}

/* Follows the build to its end; a watch cut by the deadline is started again. */
static int follow(st_client *client, const char *id, bool quiet, st_build_info **final,
                  st_error *err) {
  struct watch_out w = {.quiet = quiet};
  for (;;) {
    w.skip = w.seen;
    w.seen = 0;
    int r = st_client_build_watch(client, id, on_watch, &w, final, err);
    if (r != ST_ETIMEOUT)
      return r;
  }
}

/* The recipe and its context: the local checks a server would make. */
static int prepare(cli_ctx *ctx, const char *recipe, const char *cell, st_store **store,
                   st_build_request *req) {
  int rc = cli_open_store(ctx, ST_STORE_CREATE, store);
  if (rc)
    return rc;
  st_error err = {0};
  st_pack_stats ps;
  double t0 = st_now();
  int r = st_build_context_pack(*store, recipe, cell, cli_source_date_epoch(), cli_threads(ctx),
                                req, &ps, &err);
  if (r == ST_EFORMAT || r == ST_ENOENT || r == ST_EINVAL || r == ST_EUNSAFE) {
    fprintf(stderr, "strata: error: %s\n", err.msg); /* the recipe: exit 2 */
    return CLI_EXIT_USAGE;
  }
  if (r < 0)
    return cli_fail(&err);
  char a[16];
  if (!ctx->quiet && req->has_context)
    fprintf(stderr, "context: %llu files, %s, packed in %.2f s\n",
            (unsigned long long)(ps.files + ps.symlinks + ps.hardlinks),
            st_format_bytes(ps.bytes, a, sizeof a), st_now() - t0);
  return CLI_EXIT_OK;
}

static void print_images(const st_build_info *info) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  for (size_t i = 0; i < info->n_images; i++)
    printf("%s sha256:%s\n", info->images[i].ref, st_digest_hex(&info->images[i].digest, hex));
}

int cmd_submit(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] =
      "strata submit RECIPE --server ADDR [--cell K=V,...] [--detach] [--token T] "
      "[--tls-ca PEM] [--streams N] [--deadline S] [--store DIR]";
  static const struct option opts[] = {{"cell", required_argument, NULL, OPT_CELL},
                                       {"detach", no_argument, NULL, OPT_DETACH},
                                       CLI_REMOTE_LONGOPTS, CLI_COMMON_LONGOPTS};
  struct submit_args a = {0};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, submit_opt, &a);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(usage, "expected one recipe file");
  _cleanup_(st_client_freep) st_client *client = NULL;
  if ((rc = cli_remote_open(&a.ro, usage, &client)))
    return rc;
  _cleanup_(st_store_freep) st_store *store = NULL;
  st_build_request req = {0};
  if ((rc = prepare(ctx, argv[optind], a.cell, &store, &req))) {
    st_build_request_clear(&req);
    return rc;
  }
  st_error err = {0};
  st_transfer_stats ts = {0};
  int r = req.has_context ? st_client_push_layer(client, store, &req.context,
                                                 a.ro.streams ? a.ro.streams : 4, &ts, &err)
                          : ST_OK;
  if (r == ST_OK && !ctx->quiet && req.has_context)
    fprintf(stderr, "context: %llu of %llu chunks sent (%.1f MiB), %llu already on the server\n",
            (unsigned long long)ts.chunks_moved, (unsigned long long)ts.chunks_total,
            ts.bytes_moved / 1048576.0, (unsigned long long)ts.chunks_present);
  char id[72] = "";
  bool existing = false;
  if (r == ST_OK)
    r = st_client_build_submit(client, &req, id, &existing, &err);
  st_build_request_clear(&req);
  if (r == ST_EINVAL) { /* the server found the request or the recipe invalid */
    fprintf(stderr, "strata: error: %s\n", err.msg);
    return CLI_EXIT_USAGE;
  }
  if (r < 0)
    return cli_fail(&err);
  printf("build %s%s\n", id, existing ? " (an identical build exists)" : "");
  fflush(stdout);
  if (a.detach)
    return CLI_EXIT_OK;
  st_build_info *final = NULL;
  if ((r = follow(client, id, ctx->quiet, &final, &err)) < 0)
    return cli_fail(&err);
  rc = CLI_EXIT_OK;
  if (final->state == ST_BUILD_SUCCEEDED) {
    print_images(final);
  } else {
    fprintf(stderr, "strata: error: build %s %s: %s\n", id, st_build_state_name(final->state),
            final->error ? final->error : "");
    rc = CLI_EXIT_FAIL;
  }
  st_build_info_free(final);
  return rc;
}

static int remote_only(int c, const char *arg, void *ud) {
  int r = cli_remote_opt(ud, c, arg);
  if (r < 0)
    exit(CLI_EXIT_USAGE);
  return r;
}

static void print_time(const char *label, double t) {
  char buf[64] = "-";
  time_t s = (time_t)t;
  struct tm tm;
  if (t > 0 && gmtime_r(&s, &tm))
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  printf("%-10s%s\n", label, buf);
}

int cmd_builds(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata builds [BUILD_ID] --server ADDR [--token T] [--tls-ca PEM]";
  static const struct option opts[] = {CLI_REMOTE_LONGOPTS, CLI_COMMON_LONGOPTS};
  cli_remote_opts ro = {0};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, remote_only, &ro);
  if (rc)
    return rc;
  if (argc - optind > 1)
    return cli_usage_error(usage, "unexpected argument '%s'", argv[optind + 1]);
  _cleanup_(st_client_freep) st_client *client = NULL;
  if ((rc = cli_remote_open(&ro, usage, &client)))
    return rc;
  st_error err = {0};
  char hex[ST_DIGEST_HEX_LEN + 1];
  if (argc - optind == 1) {
    st_build_info *info = NULL;
    if (st_client_build_get(client, argv[optind], &info, &err) < 0)
      return cli_fail(&err);
    printf("build     sha256:%s\nstate     %s\nrecipe    %s\n", st_digest_hex(&info->id, hex),
           st_build_state_name(info->state), info->req.recipe_name);
    print_time("submitted", info->submitted);
    print_time("finished", info->finished);
    if (info->error)
      printf("error     %s\n", info->error);
    print_images(info);
    st_build_info_free(info);
    return CLI_EXIT_OK;
  }
  st_build_info **v = NULL;
  size_t n = 0;
  if (st_client_build_list(client, &v, &n, &err) < 0)
    return cli_fail(&err);
  printf("%-19s %-10s %s\n", "BUILD", "STATE", "RECIPE");
  for (size_t i = 0; i < n; i++)
    printf("sha256:%.12s %-10s %s\n", st_digest_hex(&v[i]->id, hex),
           st_build_state_name(v[i]->state), v[i]->req.recipe_name);
  st_build_infos_free(v, n);
  return CLI_EXIT_OK;
}

int cmd_cancel(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata cancel BUILD_ID --server ADDR [--token T] [--tls-ca PEM]";
  static const struct option opts[] = {CLI_REMOTE_LONGOPTS, CLI_COMMON_LONGOPTS};
  cli_remote_opts ro = {0};
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, remote_only, &ro);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(usage, "expected one build id");
  _cleanup_(st_client_freep) st_client *client = NULL;
  if ((rc = cli_remote_open(&ro, usage, &client)))
    return rc;
  st_error err = {0};
  st_build_info *info = NULL;
  if (st_client_build_cancel(client, argv[optind], &info, &err) < 0)
    return cli_fail(&err);
  printf("build %s %s\n", argv[optind], st_build_state_name(info->state));
  st_build_info_free(info);
  return CLI_EXIT_OK;
}
