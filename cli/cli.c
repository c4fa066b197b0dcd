/* SPDX-License-Identifier: Apache-2.0 */
/* Option handling and error reporting shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "pool.h"

int cli_common_opt(cli_ctx *ctx, int c, const char *arg) {
  uint64_t n;
  switch (c) {
  case 'S':
    ctx->store_path = arg;
    return 1;
  case 'v':
    st_log_set_level(st_log_get_level() + 1);
    return 1;
  case 'q':
    ctx->quiet = true;
    st_log_set_level(ST_LOG_ERROR);
    return 1;
  case 'j':
    if (cli_parse_size(arg, &n) < 0 || n > 256) {
      fprintf(stderr, "strata: -j takes a number of threads from 0 to 256, not '%s'\n", arg);
      return -1;
    }
    ctx->threads = (unsigned)n;
    return 1;
  default:
    return 0;
  }
}

int cli_parse_opts(cli_ctx *ctx, int argc, char **argv, const struct option *opts,
                   const char *usage, cli_extra_opt_fn extra, void *ud) {
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, CLI_COMMON_SHORTOPTS, opts, NULL)) != -1) {
    if (c == 'h') {
      printf("usage: %s\n", usage);
      exit(CLI_EXIT_OK);
    }
    int r = cli_common_opt(ctx, c, optarg);
    if (r < 0)
      return CLI_EXIT_USAGE;
    if (r == 0 && (!extra || extra(c, optarg, ud) != 0))
      return cli_usage_error(usage, "unknown option");
  }
  return CLI_EXIT_OK;
}

int64_t cli_source_date_epoch(void) {
  const char *sde = getenv("SOURCE_DATE_EPOCH");
  if (!sde || !*sde)
    return 0;
  char *end;
  long long v = strtoll(sde, &end, 10);
  return *end ? 0 : v;
}

const char *cli_store_path(cli_ctx *ctx) {
  if (ctx->store_path)
    return ctx->store_path;
  if (!ctx->default_store)
    ctx->default_store = st_store_default_path();
  return ctx->default_store ? ctx->default_store : "/var/lib/strata/store";
}

unsigned cli_threads(const cli_ctx *ctx) { return ctx->threads ? ctx->threads : st_cpu_count(); }

int cli_open_store(cli_ctx *ctx, unsigned flags, st_store **out) {
  st_error err = {0};
  if (st_store_open(out, cli_store_path(ctx), flags, &err) < 0)
    return cli_fail(&err);
  return CLI_EXIT_OK;
}

int cli_fail(const st_error *err) {
  fprintf(stderr, "strata: error: %s\n", err->msg[0] ? err->msg : st_code_message(err->code));
  return CLI_EXIT_FAIL;
}

int cli_usage_error(const char *usage, const char *fmt, ...) {
  va_list ap;
  fputs("strata: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: %s\n", usage);
  return CLI_EXIT_USAGE;
}

int cli_parse_size(const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  if (!text || text[0] == '-' || text[0] == '\0')
    return -1;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text)
    return -1;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k')
    shift = 10;
  else if (*end == 'M')
    shift = 20;
  else if (*end == 'G')
    shift = 30;
  if (shift)
    end++;
  if (*end || (shift && v > (UINT64_MAX >> shift)))
    return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

int cli_parse_size_opt(const char *name, const char *text, uint64_t *out) {
  if (cli_parse_size(text, out) == 0)
    return 0;
  fprintf(stderr, "strata: invalid --%s '%s' (bytes, e.g. 50M)\n", name, text);
  return -1;
}
