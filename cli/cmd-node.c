/* SPDX-License-Identifier: Apache-2.0 */
/* strata prewarm | env run|ls|rm | node status|gc: the node side
 * (docs/NODE.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "client.h"
#include "fs.h"
#include "node.h"
#include "progress.h"

enum {
  OPT_NODE_DIR = 0x100,
  OPT_FROM_STORE,
  OPT_IMAGE,
  OPT_IMAGES_FROM,
  OPT_JSON,
  OPT_NO_WAIT,
  OPT_MAX_RATE,
  OPT_KEEP,
  OPT_MAX_BYTES,
};

#define NODE_LONGOPT {"node-dir", required_argument, NULL, OPT_NODE_DIR}

typedef struct {
  const char *node_dir;
  char *default_dir;
  const char *from_store;
  cli_remote_opts remote;
  char **images;
  size_t n_images;
  bool json, no_wait;
  uint64_t max_rate, max_bytes;
  bool bad_value, bad_file;
  const char *usage;
} node_opts;

static void node_opts_free(node_opts *o) {
  for (size_t i = 0; i < o->n_images; i++)
    free(o->images[i]);
  free(o->images);
  free(o->default_dir);
}

static int push_image(node_opts *o, const char *ref) {
  char **ni = realloc(o->images, (o->n_images + 1) * sizeof *ni);
  if (!ni)
    return -1;
  o->images = ni;
  if (!(ni[o->n_images] = strdup(ref)))
    return -1;
  o->n_images++;
  return 0;
}

/* One image reference a line; blank lines and '#' comments skipped. */
static int read_images_file(node_opts *o, const char *path) {
  _cleanup_fclose_ FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "strata: error: images file %s: %s\n", path, strerror(errno));
    return -1;
  }
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *s = line + strspn(line, " \t");
    char *hash = strchr(s, '#');
    if (hash)
      *hash = '\0';
    size_t len = strcspn(s, " \t\r\n");
    s[len] = '\0';
    if (*s && push_image(o, s) < 0)
      return -1;
  }
  return 0;
}

static int extra_opt(int c, const char *arg, void *ud) {
  node_opts *o = ud;
  int r = cli_remote_opt(&o->remote, c, arg);
  if (r <= 0) {
    if (r < 0)
      o->bad_value = true;
    return 0;
  }
  switch (c) {
  case OPT_NODE_DIR: o->node_dir = arg; return 0;
  case OPT_FROM_STORE: o->from_store = arg; return 0;
  case OPT_IMAGE:
  case OPT_KEEP: return push_image(o, arg) < 0 ? -1 : 0;
  case OPT_IMAGES_FROM:
    if (read_images_file(o, arg) < 0)
      o->bad_file = true;
    return 0;
  case OPT_JSON: o->json = true; return 0;
  case OPT_NO_WAIT: o->no_wait = true; return 0;
  case OPT_MAX_RATE:
  case OPT_MAX_BYTES:
    if (cli_parse_size_opt(c == OPT_MAX_RATE ? "max-rate" : "max-bytes", arg,
                           c == OPT_MAX_RATE ? &o->max_rate : &o->max_bytes) < 0)
      o->bad_value = true;
    return 0;
  default: return -1;
  }
}

static const char *node_dir(node_opts *o) {
  if (o->node_dir)
    return o->node_dir;
  if (!o->default_dir)
    o->default_dir = st_node_default_dir();
  return o->default_dir ? o->default_dir : "/var/lib/strata/node";
}

static int parse(cli_ctx *ctx, int argc, char **argv, const struct option *opts,
                 const char *usage, node_opts *o) {
  o->usage = usage;
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, extra_opt, o);
  if (rc == CLI_EXIT_OK && o->bad_value)
    rc = CLI_EXIT_USAGE;
  if (rc == CLI_EXIT_OK && o->bad_file)
    rc = CLI_EXIT_FAIL;
  return rc;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* ---- prewarm ---------------------------------------------------------------- */

static const char prewarm_usage[] =
    "strata prewarm (--from-store DIR | --server ADDR [--token T] [--tls-ca PEM] [--streams N])\n"
    "              [--image IMAGE]... [--images-from FILE] [--node-dir DIR] [--json] [--no-wait]\n"
    "              [--max-rate BYTES] [-j N] [IMAGE...]";

static void waiting(pid_t holder, void *ud) {
  fprintf(stderr, "strata: waiting for node %s (locked by pid %ld)\n", (const char *)ud,
          (long)holder);
}

static void print_result(const char *ref, const st_prewarm_result *r, int rc, const st_error *err,
                         bool json, bool first) {
  char hex[ST_DIGEST_HEX_LEN + 1] = "";
  if (r->resolved)
    st_digest_hex(&r->digest, hex);
  const char *result = rc < 0 ? "failed" : r->was_ready ? "ready" : "prewarmed";
  if (json) {
    printf("%s    {\"image\": ", first ? "" : ",\n");
    json_str(stdout, ref);
    printf(", \"digest\": \"%s%s\", \"result\": \"%s\", \"bytes_fetched\": %llu, "
           "\"bytes_reused\": %llu, \"chunks_fetched\": %llu, \"chunks_needed\": %llu, "
           "\"files\": %llu, \"files_reused\": %llu, \"layers\": %llu, \"layers_committed\": %llu, \"seconds\": %.3f, "
           "\"fetch_seconds\": %.3f, \"commit_seconds\": %.3f, \"checkout_seconds\": %.3f",
           hex[0] ? "sha256:" : "", hex, result, (unsigned long long)r->copy.bytes_fetched,
           (unsigned long long)r->copy.bytes_reused, (unsigned long long)r->copy.chunks_fetched,
           (unsigned long long)r->copy.chunks_needed, (unsigned long long)r->files,
           (unsigned long long)r->files_reused, (unsigned long long)r->layers_total, (unsigned long long)r->layers_committed,
           r->seconds, r->fetch_seconds, r->commit_seconds, r->checkout_seconds);
    if (rc < 0) {
      printf(", \"error\": ");
      json_str(stdout, err->msg);
    }
    printf("}");
    return;
  }
  if (rc < 0)
    return;
  char a[16], b[16];
  printf("%s sha256:%s %s: fetched %s (%llu chunks), reused %s, %llu of %llu layers committed, "
         "%.2f s\n",
         ref, hex, result, st_format_bytes(r->copy.bytes_fetched, a, sizeof a),
         (unsigned long long)r->copy.chunks_fetched,
         st_format_bytes(r->copy.bytes_reused, b, sizeof b),
         (unsigned long long)r->layers_committed, (unsigned long long)r->layers_total, r->seconds);
}

int cmd_prewarm(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {
      NODE_LONGOPT,
      {"from-store", required_argument, NULL, OPT_FROM_STORE},
      {"image", required_argument, NULL, OPT_IMAGE},
      {"images-from", required_argument, NULL, OPT_IMAGES_FROM},
      {"json", no_argument, NULL, OPT_JSON},
      {"no-wait", no_argument, NULL, OPT_NO_WAIT},
      {"max-rate", required_argument, NULL, OPT_MAX_RATE},
      CLI_REMOTE_LONGOPTS,
      CLI_COMMON_LONGOPTS};
  _cleanup_(node_opts_free) node_opts o = {0};
  int rc = parse(ctx, argc, argv, opts, prewarm_usage, &o);
  if (rc)
    return rc;
  for (int i = optind; i < argc; i++)
    if (push_image(&o, argv[i]) < 0)
      return cli_usage_error(prewarm_usage, "out of memory");
  if (!o.n_images)
    return cli_usage_error(prewarm_usage, "no image given");
  if (!!o.from_store == !!o.remote.server)
    return cli_usage_error(prewarm_usage, "give exactly one of --from-store DIR and --server ADDR");
  st_error err = {0};
  _cleanup_(st_node_source_freep) st_node_source *src = NULL;
  if (o.remote.server) {
    st_client *client = NULL;
    if ((rc = cli_remote_open(&o.remote, prewarm_usage, &client)))
      return rc;
    unsigned streams = o.remote.streams ? o.remote.streams : cli_threads(ctx);
    if (st_node_source_server(&src, client, o.remote.server, streams, &err) < 0)
      return cli_fail(&err);
  } else if (st_node_source_store(&src, o.from_store, &err) < 0)
    return cli_fail(&err);
  _cleanup_(st_node_freep) st_node *n = NULL;
  if (st_node_open(&n, node_dir(&o), true, &err) < 0)
    return cli_fail(&err);
  if (st_node_lock(n, !o.no_wait, ctx->quiet ? NULL : waiting, (void *)node_dir(&o), &err) < 0) {
    cli_fail(&err);
    return err.code == ST_EBUSY ? CLI_EXIT_BUSY : CLI_EXIT_FAIL;
  }
  st_prewarm_opts po = {.threads = cli_threads(ctx), .max_rate = o.max_rate,
                        .progress = !ctx->quiet && !o.json && st_progress_wanted()};
  int failed = 0;
  if (o.json)
    printf("{\"node\": ");
  if (o.json) {
    json_str(stdout, node_dir(&o));
    printf(", \"images\": [\n");
  }
  for (size_t i = 0; i < o.n_images; i++) {
    st_prewarm_result r;
    st_error_clear(&err);
    rc = st_node_prewarm(n, src, o.images[i], &po, &r, &err);
    if (rc < 0) {
      failed++;
      fprintf(stderr, "strata: error: prewarm %s: %s\n", o.images[i], err.msg);
    }
    print_result(o.images[i], &r, rc, &err, o.json, i == 0);
    fflush(stdout);
  }
  if (o.json)
    printf("\n  ], \"result\": \"%s\"}\n", failed ? "failed" : "ok");
  return failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* ---- env -------------------------------------------------------------------- */

static const char env_ls_usage[] = "strata env ls [--node-dir DIR]";
static const char env_rm_usage[] = "strata env rm [--node-dir DIR] IMAGE...";

static void print_images(const st_node_image *imgs, size_t n) {
  printf("%-40s %-19s %10s  %-19s %s\n", "IMAGE", "DIGEST", "SIZE", "LAST USED", "IN USE");
  for (size_t i = 0; i < n; i++) {
    char hex[ST_DIGEST_HEX_LEN + 1], sz[16], when[32] = "-";
    st_digest_hex(&imgs[i].digest, hex);
    if (imgs[i].last_used) {
      time_t t = (time_t)imgs[i].last_used;
      struct tm tm;
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", gmtime_r(&t, &tm));
    }
    char tags[256] = "";
    for (size_t k = 0; k < imgs[i].n_tags; k++)
      snprintf(tags + strlen(tags), sizeof tags - strlen(tags), "%s%s", k ? "," : "",
               imgs[i].tags[k]);
    printf("%-40s sha256:%.12s %10s  %-19s %s\n", tags[0] ? tags : "-", hex,
           st_format_bytes(imgs[i].size, sz, sizeof sz), when, imgs[i].in_use ? "yes" : "no");
  }
}

static int open_node(node_opts *o, st_node **n, st_error *err) {
  return st_node_open(n, node_dir(o), false, err);
}

static int env_ls(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {NODE_LONGOPT, CLI_COMMON_LONGOPTS};
  _cleanup_(node_opts_free) node_opts o = {0};
  int rc = parse(ctx, argc, argv, opts, env_ls_usage, &o);
  if (rc)
    return rc;
  if (optind != argc)
    return cli_usage_error(env_ls_usage, "unexpected argument '%s'", argv[optind]);
  st_error err = {0};
  _cleanup_(st_node_freep) st_node *n = NULL;
  st_node_image *imgs = NULL;
  size_t count = 0;
  if (open_node(&o, &n, &err) < 0 || st_node_images(n, &imgs, &count, &err) < 0)
    return cli_fail(&err);
  print_images(imgs, count);
  st_node_images_free(imgs, count);
  return CLI_EXIT_OK;
}

static int env_rm(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {NODE_LONGOPT, CLI_COMMON_LONGOPTS};
  _cleanup_(node_opts_free) node_opts o = {0};
  int rc = parse(ctx, argc, argv, opts, env_rm_usage, &o);
  if (rc)
    return rc;
  if (optind == argc)
    return cli_usage_error(env_rm_usage, "no image given");
  st_error err = {0};
  _cleanup_(st_node_freep) st_node *n = NULL;
  if (open_node(&o, &n, &err) < 0 ||
      st_node_lock(n, true, ctx->quiet ? NULL : waiting, (void *)node_dir(&o), &err) < 0)
    return cli_fail(&err);
  for (int i = optind; i < argc; i++) {
    st_digest d;
    if (st_node_resolve(n, argv[i], &d, &err) < 0 || st_node_remove(n, &d, &err) < 0) {
      st_error_prefix(&err, "env rm %s", argv[i]);
      return cli_fail(&err);
    }
    if (!ctx->quiet)
      fprintf(stderr, "removed %s\n", argv[i]);
  }
  uint64_t freed = 0;
  if (st_node_prune(n, &freed, &err) < 0)
    return cli_fail(&err);
  if (!ctx->quiet) {
    char b[16];
    fprintf(stderr, "freed %s\n", st_format_bytes(freed, b, sizeof b));
  }
  return CLI_EXIT_OK;
}

int cmd_env(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata env run|ls|rm [--node-dir DIR] ...";
  if (argc < 2)
    return cli_usage_error(usage, "missing subcommand");
  if (!strcmp(argv[1], "run"))
    return cmd_env_run(ctx, argc - 1, argv + 1);
  if (!strcmp(argv[1], "ls"))
    return env_ls(ctx, argc - 1, argv + 1);
  if (!strcmp(argv[1], "rm"))
    return env_rm(ctx, argc - 1, argv + 1);
  return cli_usage_error(usage, "unknown subcommand '%s'", argv[1]);
}

/* ---- node ------------------------------------------------------------------- */

static const char status_usage[] = "strata node status [--node-dir DIR]";
static const char gc_usage[] =
    "strata node gc [--node-dir DIR] [--keep IMAGE]... [--max-bytes N] [--no-wait]";

static int node_status(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {NODE_LONGOPT, CLI_COMMON_LONGOPTS};
  _cleanup_(node_opts_free) node_opts o = {0};
  int rc = parse(ctx, argc, argv, opts, status_usage, &o);
  if (rc)
    return rc;
  if (optind != argc)
    return cli_usage_error(status_usage, "unexpected argument '%s'", argv[optind]);
  st_error err = {0};
  _cleanup_(st_node_freep) st_node *n = NULL;
  st_node_image *imgs = NULL;
  size_t count = 0;
  uint64_t used = 0;
  if (open_node(&o, &n, &err) < 0 || st_node_images(n, &imgs, &count, &err) < 0)
    return cli_fail(&err);
  if (st_node_usage(n, &used, &err) < 0) {
    st_node_images_free(imgs, count);
    return cli_fail(&err);
  }
  struct statvfs vfs;
  char a[16], b[16];
  uint64_t avail = statvfs(node_dir(&o), &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
  printf("node       %s\nimages     %zu\ndisk used  %s (repo + cache)\ndisk free  %s\n\n",
         node_dir(&o), count, st_format_bytes(used, a, sizeof a),
         st_format_bytes(avail, b, sizeof b));
  print_images(imgs, count);
  st_node_images_free(imgs, count);
  return CLI_EXIT_OK;
}

static int node_gc(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {NODE_LONGOPT,
                                       {"keep", required_argument, NULL, OPT_KEEP},
                                       {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
                                       {"no-wait", no_argument, NULL, OPT_NO_WAIT},
                                       CLI_COMMON_LONGOPTS};
  _cleanup_(node_opts_free) node_opts o = {0};
  int rc = parse(ctx, argc, argv, opts, gc_usage, &o);
  if (rc)
    return rc;
  if (optind != argc)
    return cli_usage_error(gc_usage, "unexpected argument '%s'", argv[optind]);
  st_error err = {0};
  _cleanup_(st_node_freep) st_node *n = NULL;
  if (open_node(&o, &n, &err) < 0)
    return cli_fail(&err);
  if (st_node_lock(n, !o.no_wait, ctx->quiet ? NULL : waiting, (void *)node_dir(&o), &err) < 0) {
    cli_fail(&err);
    return err.code == ST_EBUSY ? CLI_EXIT_BUSY : CLI_EXIT_FAIL;
  }
  _cleanup_free_ st_digest *keep = calloc(o.n_images + 1, sizeof *keep);
  if (!keep)
    return cli_fail(&(st_error){ST_ENOMEM, "out of memory"});
  size_t n_keep = 0;
  for (size_t i = 0; i < o.n_images; i++) {
    /* an image named to keep that is not on the node has nothing to keep */
    if (st_node_resolve(n, o.images[i], &keep[n_keep], &err) == ST_OK)
      n_keep++;
    else if (err.code != ST_ENOENT)
      return cli_fail(&err);
  }
  st_gc_result r;
  if (st_node_gc(n, keep, n_keep, o.max_bytes, &r, &err) < 0)
    return cli_fail(&err);
  char a[16], b[16];
  printf("removed %zu image%s (%zu kept: in use, %zu kept: pinned); %s -> %s\n", r.removed,
         r.removed == 1 ? "" : "s", r.kept_in_use, r.kept_pinned,
         st_format_bytes(r.bytes_before, a, sizeof a), st_format_bytes(r.bytes_after, b, sizeof b));
  if (o.max_bytes && r.bytes_after > o.max_bytes && !ctx->quiet)
    fprintf(stderr, "strata: warning: node still takes %s, over --max-bytes\n", b);
  return CLI_EXIT_OK;
}

int cmd_node(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata node status|gc [--node-dir DIR] ...";
  if (argc < 2)
    return cli_usage_error(usage, "missing subcommand");
  if (!strcmp(argv[1], "status"))
    return node_status(ctx, argc - 1, argv + 1);
  if (!strcmp(argv[1], "gc"))
    return node_gc(ctx, argc - 1, argv + 1);
  return cli_usage_error(usage, "unknown subcommand '%s'", argv[1]);
}
