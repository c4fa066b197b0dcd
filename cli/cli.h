/* SPDX-License-Identifier: Apache-2.0 */
/* Shared pieces of the strata command: options every subcommand takes,
 * opening the store, and reporting errors as one line. */
#pragma once

#include <getopt.h>
#include <stdbool.h>

#include "error.h"
#include "store.h"

typedef struct st_client st_client; /* client.h */

/* Exit codes (docs/CLI.md). */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_FAIL = 1,  /* the operation failed; the message says why */
  CLI_EXIT_USAGE = 2, /* bad command line */
  CLI_EXIT_BUSY = 3,  /* the node is locked by another prewarm or gc (--no-wait) */
};

typedef struct {
  const char *store_path; /* --store, else default */
  char *default_store;    /* owned */
  unsigned threads;       /* -j; 0 = number of CPUs */
  bool quiet;
} cli_ctx;

/* Long options every subcommand accepts; put them last in its table. */
#define CLI_COMMON_LONGOPTS                                                                         \
  {"store", required_argument, NULL, 'S'}, {"verbose", no_argument, NULL, 'v'},                   \
      {"quiet", no_argument, NULL, 'q'}, {"jobs", required_argument, NULL, 'j'},                  \
      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}
#define CLI_COMMON_SHORTOPTS "vqj:h"

/* Handles a common option. Returns 1 if handled, 0 if not a common option,
 * -1 on a bad value (message printed). 'h' is left to the caller. */
int cli_common_opt(cli_ctx *ctx, int c, const char *arg);

/* Parses the options of a subcommand (argv[0] is its name): the common ones,
 * and others through extra (returns non-zero for an unknown option). -h
 * prints the usage and exits. Positional arguments are left at
 * argv[optind..]. Returns CLI_EXIT_OK or CLI_EXIT_USAGE (message printed). */
typedef int (*cli_extra_opt_fn)(int c, const char *arg, void *ud);
int cli_parse_opts(cli_ctx *ctx, int argc, char **argv, const struct option *opts,
                   const char *usage, cli_extra_opt_fn extra, void *ud);
/* SOURCE_DATE_EPOCH when set to a number, else 0: the normalised mtime. */
int64_t cli_source_date_epoch(void);

/* Opens the store (flags as st_store_open); prints the error on failure. */
int cli_open_store(cli_ctx *ctx, unsigned flags, st_store **out);
const char *cli_store_path(cli_ctx *ctx);
unsigned cli_threads(const cli_ctx *ctx);

/* Prints "strata: error: MSG" and returns CLI_EXIT_FAIL. */
int cli_fail(const st_error *err);
/* Prints "strata: MSG" and the usage hint; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses an unsigned decimal number with an optional K/M/G suffix. */
int cli_parse_size(const char *text, uint64_t *out);
/* cli_parse_size for option --NAME; prints "strata: invalid --NAME 'TEXT'
 * (bytes, e.g. 50M)" and returns -1 on a bad value. */
int cli_parse_size_opt(const char *name, const char *text, uint64_t *out);

int cmd_store(cli_ctx *ctx, int argc, char **argv);
/* `env run` (cmd-env-run.c): argv[0] is "run". */
int cmd_env_run(cli_ctx *ctx, int argc, char **argv);
int cmd_layer(cli_ctx *ctx, int argc, char **argv);
int cmd_build(cli_ctx *ctx, int argc, char **argv);
int cmd_plan(cli_ctx *ctx, int argc, char **argv);
int cmd_images(cli_ctx *ctx, int argc, char **argv);
int cmd_inspect(cli_ctx *ctx, int argc, char **argv);
int cmd_tag(cli_ctx *ctx, int argc, char **argv);
int cmd_rmi(cli_ctx *ctx, int argc, char **argv);
int cmd_export(cli_ctx *ctx, int argc, char **argv);

/* Client options of commands that talk to a server (push, pull, submit):
 * put CLI_REMOTE_LONGOPTS in the option table and pass cli_remote_opt to
 * the option parser; cli_remote_open then makes the client (the token comes
 * from --token, else $STRATA_TOKEN). */
typedef struct {
  const char *server, *token, *tls_ca, *tls_cert, *tls_key, *tls_server_name;
  double deadline; /* seconds per call; 0: the client default */
  unsigned streams;
} cli_remote_opts;
#define CLI_REMOTE_LONGOPTS                                                                         \
  {"server", required_argument, NULL, 1000}, {"token", required_argument, NULL, 1001},            \
      {"tls-ca", required_argument, NULL, 1002}, {"tls-cert", required_argument, NULL, 1003},     \
      {"tls-key", required_argument, NULL, 1004},                                                 \
      {"tls-server-name", required_argument, NULL, 1005},                                         \
      {"deadline", required_argument, NULL, 1006}, {"streams", required_argument, NULL, 1007}
/* 0 handled, 1 not a remote option, -1 bad value (message printed). */
int cli_remote_opt(cli_remote_opts *o, int c, const char *arg);
/* Opens the client; prints the error and returns CLI_EXIT_FAIL/USAGE. */
int cli_remote_open(const cli_remote_opts *o, const char *usage, st_client **out);

int cmd_serve(cli_ctx *ctx, int argc, char **argv);
int cmd_push(cli_ctx *ctx, int argc, char **argv);
int cmd_pull(cli_ctx *ctx, int argc, char **argv);
int cmd_token(cli_ctx *ctx, int argc, char **argv);
int cmd_publish(cli_ctx *ctx, int argc, char **argv);
int cmd_submit(cli_ctx *ctx, int argc, char **argv);
int cmd_builds(cli_ctx *ctx, int argc, char **argv);
int cmd_cancel(cli_ctx *ctx, int argc, char **argv);
int cmd_prewarm(cli_ctx *ctx, int argc, char **argv);
int cmd_env(cli_ctx *ctx, int argc, char **argv);
int cmd_node(cli_ctx *ctx, int argc, char **argv);
