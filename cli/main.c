/* SPDX-License-Identifier: Apache-2.0 */
/* The strata command: dispatches to subcommands. Built twice
 * (cli/meson.build): as strata-core with every command, and with
 * STRATA_LAUNCHER as the lean `strata`, which runs `env run` itself (it links
 * no gRPC, OSTree or libcurl, so it starts in a few milliseconds instead of
 * loading ~110 shared libraries) and execs strata-core for the rest. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "log.h"
#include "strata-config.h"

static const char usage[] =
    "usage: strata [-v] [--store DIR] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  store init|fsck|stats        create, verify or measure a store\n"
    "  layer pack|unpack|ls|diff    turn a tree into a layer and back\n"
    "  build RECIPE [--cell K=V]    build a recipe's images (all matrix cells)\n"
    "  plan RECIPE                  show cells, layer keys and what is cached\n"
    "  images                       list tagged images\n"
    "  inspect IMAGE                layers, sizes, config and labels of an image\n"
    "  tag IMAGE NAME:TAG           add a tag\n"
    "  rmi NAME:TAG...              remove tags\n"
    "  export IMAGE DIR             write the composed root file system\n"
    "  serve [--listen ADDR]        run the gRPC server on the store (docs/API.md)\n"
    "  push|pull IMAGE --server A   send or fetch an image, only the missing chunks\n"
    "  token add FILE NAME ROLE     create a server token (printed once, stored hashed)\n"
    "  publish IMAGE --oci DIR[:TAG] | --registry HOST/REPO:TAG   publish as an OCI image\n"
    "  submit RECIPE --server A     build a recipe on the server and follow it (docs/BUILDS.md)\n"
    "  builds [ID] --server A       list the server's builds, or show one\n"
    "  cancel ID --server A         cancel a build\n"
    "  prewarm --server A IMAGE...  bring images onto this node, ready to start\n"
    "  env run IMAGE [-- CMD]       run a command in a pre-warmed image\n"
    "  env ls|rm                    list or remove pre-warmed images\n"
    "  node status|gc               node disk use; free least-recently-used images\n"
    "  version                      print the version\n"
    "\n"
    "Every command takes --store DIR (default: $STRATA_STORE, else a per-user\n"
    "store), -v (more log output; also STRATA_LOG=debug), -q and -j N.\n";

#ifdef STRATA_LAUNCHER
/* strata-core: $STRATA_CORE, else next to this executable (a build tree),
 * else in libexecdir. Returns only on failure. */
static int exec_core(char **argv) {
  const char *env = getenv("STRATA_CORE");
  if (env && *env) {
    execv(env, argv);
    fprintf(stderr, "strata: error: cannot run STRATA_CORE=%s: %m\n", env);
    return CLI_EXIT_FAIL;
  }
  char self[PATH_MAX], path[PATH_MAX + 16];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      snprintf(path, sizeof path, "%s/strata-core", self);
      execv(path, argv);
    }
  }
  execv(STRATA_LIBEXECDIR "/strata/strata-core", argv);
  fprintf(stderr, "strata: error: cannot run %s/strata/strata-core: %m\n", STRATA_LIBEXECDIR);
  return CLI_EXIT_FAIL;
}
#endif

int main(int argc, char **argv) {
  st_log_init_from_env();
  cli_ctx ctx = {0};
  int i = 1;
  /* Common options may also come before the command. */
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose"))
      cli_common_opt(&ctx, 'v', NULL);
    else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet"))
      cli_common_opt(&ctx, 'q', NULL);
    else if ((!strcmp(argv[i], "-j") || !strcmp(argv[i], "--jobs")) && i + 1 < argc) {
      if (cli_common_opt(&ctx, 'j', argv[++i]) < 0)
        return CLI_EXIT_USAGE;
    } else if (!strcmp(argv[i], "--store") && i + 1 < argc)
      ctx.store_path = argv[++i];
    else if (!strncmp(argv[i], "--store=", 8))
      ctx.store_path = argv[i] + 8;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return CLI_EXIT_OK;
    } else {
      fprintf(stderr, "strata: unknown option '%s'\n%s", argv[i], usage);
      return CLI_EXIT_USAGE;
    }
  }
  if (i >= argc) {
    fputs(usage, stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[i];
  int rc;
#ifdef STRATA_LAUNCHER
  if (!strcmp(cmd, "env") && i + 1 < argc && !strcmp(argv[i + 1], "run"))
    rc = cmd_env_run(&ctx, argc - i - 1, argv + i + 1);
  else if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("strata %s\n", STRATA_VERSION);
    rc = CLI_EXIT_OK;
  } else
    rc = exec_core(argv);
#else
  if (!strcmp(cmd, "store"))
    rc = cmd_store(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "layer"))
    rc = cmd_layer(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "build"))
    rc = cmd_build(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "plan"))
    rc = cmd_plan(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "images"))
    rc = cmd_images(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "inspect"))
    rc = cmd_inspect(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "tag"))
    rc = cmd_tag(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "rmi"))
    rc = cmd_rmi(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "export"))
    rc = cmd_export(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "serve"))
    rc = cmd_serve(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "push"))
    rc = cmd_push(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "pull"))
    rc = cmd_pull(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "submit"))
    rc = cmd_submit(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "builds"))
    rc = cmd_builds(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "cancel"))
    rc = cmd_cancel(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "token"))
    rc = cmd_token(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "publish"))
    rc = cmd_publish(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "prewarm"))
    rc = cmd_prewarm(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "env"))
    rc = cmd_env(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "node"))
    rc = cmd_node(&ctx, argc - i, argv + i);
  else if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("strata %s\n", STRATA_VERSION);
    rc = CLI_EXIT_OK;
  } else if (!strcmp(cmd, "help")) {
    fputs(usage, stdout);
    rc = CLI_EXIT_OK;
  } else {
    fprintf(stderr, "strata: unknown command '%s'\n%s", cmd, usage);
    rc = CLI_EXIT_USAGE;
  }
#endif
  free(ctx.default_store);
  return rc;
}
