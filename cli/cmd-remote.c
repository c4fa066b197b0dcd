/* SPDX-License-Identifier: Apache-2.0 */
/* strata serve | push | pull | token: the gRPC server and the client
 * commands that move images between a local store and a server. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "cli.h"
#include "client.h"
#include "log.h"
#include "progress.h"
#include "rpc.h"
#include "auth.h"

enum {
  OPT_SERVER = 1000, OPT_TOKEN, OPT_TLS_CA, OPT_TLS_CERT, OPT_TLS_KEY, OPT_TLS_NAME,
  OPT_DEADLINE, OPT_STREAMS, OPT_LISTEN, OPT_TLS_CLIENT_CA, OPT_TOKENS, OPT_WORKERS,
  OPT_MAX_MESSAGE, OPT_MAX_STREAMS, OPT_GRACE, OPT_QUIET_LOG, OPT_BUILDS, OPT_RATE,
};

int cli_remote_opt(cli_remote_opts *o, int c, const char *arg) {
  char *end;
  switch (c) {
  case OPT_SERVER: o->server = arg; return 0;
  case OPT_TOKEN: o->token = arg; return 0;
  case OPT_TLS_CA: o->tls_ca = arg; return 0;
  case OPT_TLS_CERT: o->tls_cert = arg; return 0;
  case OPT_TLS_KEY: o->tls_key = arg; return 0;
  case OPT_TLS_NAME: o->tls_server_name = arg; return 0;
  case OPT_DEADLINE:
    o->deadline = strtod(arg, &end);
    if (*end || o->deadline <= 0) {
      fprintf(stderr, "strata: invalid --deadline '%s' (seconds)\n", arg);
      return -1;
    }
    return 0;
  case OPT_STREAMS: {
    unsigned long v = strtoul(arg, &end, 10);
    if (*end || v == 0 || v > 64) {
      fprintf(stderr, "strata: invalid --streams '%s' (1..64)\n", arg);
      return -1;
    }
    o->streams = (unsigned)v;
    return 0;
  }
  default: return 1;
  }
}

int cli_remote_open(const cli_remote_opts *o, const char *usage, st_client **out) {
  if (!o->server)
    return cli_usage_error(usage, "--server ADDR is required");
  st_client_config cfg = {
      .target = o->server,
      .token = o->token ? o->token : getenv("STRATA_TOKEN"),
      .tls_ca = o->tls_ca,
      .tls_cert = o->tls_cert,
      .tls_key = o->tls_key,
      .tls_server_name = o->tls_server_name,
      .deadline_seconds = o->deadline,
  };
  if (cfg.token && !*cfg.token)
    cfg.token = NULL;
  st_error err = {0};
  if (st_client_open(out, &cfg, &err) < 0)
    return cli_fail(&err);
  return CLI_EXIT_OK;
}

static int remote_extra(int c, const char *arg, void *ud) {
  int r = cli_remote_opt(ud, c, arg);
  if (r < 0)
    exit(CLI_EXIT_USAGE);
  return r;
}

typedef struct {
  cli_remote_opts remote;
  uint64_t max_rate;
} transfer_opts;

static int transfer_opt(int c, const char *arg, void *ud) {
  transfer_opts *o = ud;
  if (c != OPT_RATE)
    return remote_extra(c, arg, &o->remote);
  if (cli_parse_size_opt("max-rate", arg, &o->max_rate) < 0)
    exit(CLI_EXIT_USAGE);
  return 0;
}

static void transfer_progress(uint64_t done, uint64_t total, void *ud) {
  st_progress_set_total(ud, total);
  st_progress_update(ud, done);
}

static void print_stats(const char *verb, const char *ref, const st_digest *d,
                        const st_transfer_stats *s) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  fprintf(stderr,
          "%s %s sha256:%s: %llu of %llu chunks moved (%.1f MiB on the wire, %.1f MiB of "
          "content), %llu already there (%.1f MiB); %llu of %llu layer indexes moved; %.2f s\n",
          verb, ref, st_digest_hex(d, hex), (unsigned long long)s->chunks_moved,
          (unsigned long long)s->chunks_total, s->bytes_moved / 1048576.0,
          s->chunk_bytes_moved / 1048576.0, (unsigned long long)s->chunks_present,
          s->chunk_bytes_present / 1048576.0, (unsigned long long)s->layers_moved,
          (unsigned long long)s->layers_total, s->seconds);
}

static int transfer(cli_ctx *ctx, int argc, char **argv, bool pull) {
  static const struct option opts[] = {
      CLI_REMOTE_LONGOPTS, {"max-rate", required_argument, NULL, OPT_RATE}, CLI_COMMON_LONGOPTS};
  const char *usage = pull ? "strata pull IMAGE --server ADDR [--token T] [--tls-ca PEM] "
                             "[--streams N] [--max-rate BYTES] [--deadline S] [--store DIR]"
                           : "strata push IMAGE --server ADDR [--token T] [--tls-ca PEM] "
                             "[--streams N] [--max-rate BYTES] [--deadline S] [--store DIR]";
  transfer_opts to = {0};
  cli_remote_opts *ro = &to.remote;
  int rc = cli_parse_opts(ctx, argc, argv, opts, usage, transfer_opt, &to);
  if (rc)
    return rc;
  if (optind + 1 != argc)
    return cli_usage_error(usage, optind == argc ? "IMAGE is required" : "unexpected argument '%s'",
                           argv[optind + (optind < argc)]);
  const char *ref = argv[optind];
  _cleanup_(st_client_freep) st_client *client = NULL;
  if ((rc = cli_remote_open(ro, usage, &client)))
    return rc;
  _cleanup_(st_store_freep) st_store *store = NULL;
  if ((rc = cli_open_store(ctx, pull ? ST_STORE_CREATE : 0, &store)))
    return rc;
  st_error err = {0};
  st_transfer_stats stats;
  st_digest d;
  _cleanup_(st_progress_freep) st_progress *p =
      st_progress_new(ref, 0, !ctx->quiet && st_progress_wanted());
  st_transfer_opts xo = {.streams = ro->streams, .max_rate = to.max_rate,
                         .progress = p ? transfer_progress : NULL, .progress_ud = p};
  int r = pull ? st_client_pull(client, store, ref, &xo, &d, &stats, &err)
               : st_client_push(client, store, ref, &xo, &d, &stats, &err);
  st_progress_free(ST_TAKE_PTR(p));
  if (r < 0)
    return cli_fail(&err);
  char hex[ST_DIGEST_HEX_LEN + 1];
  if (!ctx->quiet)
    print_stats(pull ? "pulled" : "pushed", ref, &d, &stats);
  printf("sha256:%s\n", st_digest_hex(&d, hex));
  return CLI_EXIT_OK;
}

int cmd_pull(cli_ctx *ctx, int argc, char **argv) { return transfer(ctx, argc, argv, true); }
int cmd_push(cli_ctx *ctx, int argc, char **argv) { return transfer(ctx, argc, argv, false); }

static const char serve_usage[] =
    "strata serve [--listen ADDR] [--store DIR] [--tls-cert PEM --tls-key PEM "
    "[--tls-client-ca PEM]] [--tokens FILE] [--workers N] [--max-message BYTES] "
    "[--max-streams N] [--grace SECONDS] [--no-access-log] [--builds N]";

static int serve_opt(int c, const char *arg, void *ud) {
  st_server_config *cfg = ud;
  uint64_t v = 0;
  char *end;
  if ((c == OPT_WORKERS || c == OPT_MAX_MESSAGE || c == OPT_MAX_STREAMS || c == OPT_BUILDS) &&
      (cli_parse_size(arg, &v) < 0 || v == 0 || v > (1u << 30)))
    return 1;
  switch (c) {
  case OPT_LISTEN: cfg->listen = arg; return 0;
  case OPT_TLS_CERT: cfg->tls_cert = arg; return 0;
  case OPT_TLS_KEY: cfg->tls_key = arg; return 0;
  case OPT_TLS_CLIENT_CA: cfg->tls_client_ca = arg; return 0;
  case OPT_TOKENS: cfg->tokens_path = arg; return 0;
  case OPT_WORKERS: cfg->workers = (unsigned)(v > 256 ? 256 : v); return 0;
  case OPT_MAX_MESSAGE: cfg->max_message = (unsigned)v; return 0;
  case OPT_MAX_STREAMS: cfg->max_streams = (unsigned)v; return 0;
  case OPT_QUIET_LOG: cfg->access_log = false; return 0;
  case OPT_BUILDS: cfg->builds = (unsigned)(v > 64 ? 64 : v); return 0;
  case OPT_GRACE:
    cfg->grace_seconds = strtod(arg, &end);
    return *end || cfg->grace_seconds < 0;
  default: return 1;
  }
}

int cmd_serve(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {
      {"listen", required_argument, NULL, OPT_LISTEN},
      {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
      {"tls-key", required_argument, NULL, OPT_TLS_KEY},
      {"tls-client-ca", required_argument, NULL, OPT_TLS_CLIENT_CA},
      {"tokens", required_argument, NULL, OPT_TOKENS},
      {"workers", required_argument, NULL, OPT_WORKERS},
      {"max-message", required_argument, NULL, OPT_MAX_MESSAGE},
      {"max-streams", required_argument, NULL, OPT_MAX_STREAMS},
      {"grace", required_argument, NULL, OPT_GRACE},
      {"no-access-log", no_argument, NULL, OPT_QUIET_LOG},
      {"builds", required_argument, NULL, OPT_BUILDS},
      CLI_COMMON_LONGOPTS};
  st_server_config cfg = {.listen = "127.0.0.1:7070", .grace_seconds = 10, .access_log = true};
  int rc = cli_parse_opts(ctx, argc, argv, opts, serve_usage, serve_opt, &cfg);
  if (rc)
    return rc;
  if (optind != argc)
    return cli_usage_error(serve_usage, "unexpected argument '%s'", argv[optind]);
  cfg.store_path = cli_store_path(ctx);
  /* gRPC's threads inherit the mask: only sigwait below sees these. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  st_error err = {0};
  st_server *srv = NULL;
  if (st_server_new(&srv, &cfg, &err) < 0 || st_server_start(srv, &err) < 0) {
    st_server_free(srv);
    return cli_fail(&err);
  }
  const char *colon = strrchr(cfg.listen, ':');
  fprintf(stderr, "strata serve: listening on %.*s:%d (store %s, %s%s)\n",
          colon ? (int)(colon - cfg.listen) : (int)strlen(cfg.listen), cfg.listen,
          st_server_port(srv), cfg.store_path, cfg.tls_cert ? "TLS" : "plain text",
          cfg.tokens_path ? ", tokens required" : "");
  int sig = 0;
  sigwait(&set, &sig);
  fprintf(stderr, "strata serve: %s, shutting down (grace %.0f s)\n", strsignal(sig),
          cfg.grace_seconds);
  st_server_free(srv);
  fprintf(stderr, "strata serve: stopped\n");
  return CLI_EXIT_OK;
}

static const char token_usage[] = "strata token add FILE NAME ROLE   (ROLE: pull, push, build, admin)";

int cmd_token(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, token_usage, NULL, NULL);
  if (rc)
    return rc;
  if (argc - optind != 4 || strcmp(argv[optind], "add"))
    return cli_usage_error(token_usage, "expected: add FILE NAME ROLE");
  st_error err = {0};
  st_role role;
  if (st_role_parse(argv[optind + 3], &role, &err) < 0)
    return cli_usage_error(token_usage, "%s", err.msg);
  _cleanup_free_ char *token = NULL;
  if (st_tokens_add(argv[optind + 1], argv[optind + 2], role, &token, &err) < 0)
    return cli_fail(&err);
  printf("%s\n", token);
  if (!ctx->quiet)
    fprintf(stderr, "added token '%s' (role %s) to %s; it is shown only now\n", argv[optind + 2],
            st_role_name(role), argv[optind + 1]);
  return CLI_EXIT_OK;
}
