/* SPDX-License-Identifier: Apache-2.0 */
/* strata env run: a command in a pre-warmed image (docs/NODE.md). Linked
 * into the lean `strata` launcher as well as strata-core, so it needs only
 * the cache and node_env_dep (no gRPC, no OSTree: see cli/meson.build). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "cli.h"
#include "node.h"

enum { OPT_NODE_DIR = 0x100, OPT_ENV, OPT_WORKDIR, OPT_NO_GPU };

static const char usage[] =
    "strata env run [--node-dir DIR] [--env KEY=VALUE]... [--workdir DIR] [--no-gpu] IMAGE "
    "[-- CMD [ARG...]]";

typedef struct {
  const char *node_dir, *workdir;
  char *default_dir;
  const char **env; /* NULL-terminated */
  size_t n_env;
  bool no_gpu, bad_value;
} run_opts;

static void run_opts_free(run_opts *o) {
  free(o->env);
  free(o->default_dir);
}

static int run_opt(run_opts *o, int c, const char *arg) {
  switch (c) {
  case OPT_NODE_DIR: o->node_dir = arg; return 0;
  case OPT_NO_GPU: o->no_gpu = true; return 0;
  case OPT_WORKDIR: o->workdir = arg; return 0;
  case OPT_ENV: {
    const char **ne = realloc(o->env, (o->n_env + 2) * sizeof *ne);
    if (!ne)
      return -1;
    o->env = ne;
    ne[o->n_env++] = arg;
    ne[o->n_env] = NULL;
    if (!strchr(arg, '=') || arg[0] == '=') {
      fprintf(stderr, "strata: --env takes KEY=VALUE, not '%s'\n", arg);
      o->bad_value = true;
    }
    return 0;
  }
  default: return -1;
  }
}

int cmd_env_run(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {
      {"node-dir", required_argument, NULL, OPT_NODE_DIR},
      {"env", required_argument, NULL, OPT_ENV},
      {"workdir", required_argument, NULL, OPT_WORKDIR},
      {"no-gpu", no_argument, NULL, OPT_NO_GPU},
      CLI_COMMON_LONGOPTS};
  _cleanup_(run_opts_free) run_opts o = {0};
  /* Stop at the image: what follows belongs to the command. */
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "+" CLI_COMMON_SHORTOPTS, opts, NULL)) != -1) {
    if (c == 'h') {
      printf("usage: %s\n", usage);
      return CLI_EXIT_OK;
    }
    int r = cli_common_opt(ctx, c, optarg);
    if (r < 0)
      return CLI_EXIT_USAGE;
    if (r == 0 && run_opt(&o, c, optarg) != 0)
      return cli_usage_error(usage, "unknown option");
  }
  if (o.bad_value)
    return CLI_EXIT_USAGE;
  if (optind >= argc)
    return cli_usage_error(usage, "no image given");
  const char *ref = argv[optind++];
  if (optind < argc && !strcmp(argv[optind], "--"))
    optind++;
  if (!o.node_dir && !(o.node_dir = o.default_dir = st_node_default_dir()))
    return cli_fail(&(st_error){ST_ENOMEM, "out of memory"});
  st_env_opts eo = {.cmd = (const char *const *)(argv + optind), .workdir = o.workdir,
                    .env = o.env, .gpu = !o.no_gpu};
  st_error err = {0};
  _cleanup_(st_node_freep) st_node *n = NULL;
  if (st_node_open(&n, o.node_dir, false, &err) < 0)
    return cli_fail(&err);
  int status = 0;
  if (st_env_run(n, ref, &eo, &status, &err) < 0)
    return cli_fail(&err);
  return status;
}
