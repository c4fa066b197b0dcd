/* SPDX-License-Identifier: Apache-2.0 */
/* strata layer pack | unpack | ls | diff */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cleanup.h"
#include "cli.h"
#include "fs.h"
#include "layer-writer.h"
#include "progress.h"
#include "unpack.h"


static const char pack_usage[] =
    "strata layer pack [--store DIR] [-j N] [--keep-mtime] [--owner-root] DIR";
static const char unpack_usage[] = "strata layer unpack [--store DIR] [-j N] [--no-chown] DIGEST DEST";
static const char ls_usage[] = "strata layer ls [--store DIR] DIGEST";
static const char diff_usage[] = "strata layer diff [--store DIR] DIGEST_A DIGEST_B";

static void progress_cb(uint64_t done, uint64_t total, void *ud) {
  st_progress_set_total(ud, total);
  st_progress_update(ud, done);
}


static int pack_opt(int c, const char *arg, void *ud) {
  st_pack_opts *o = ud;
  if (c == 'k')
    o->keep_mtime = 1;
  else if (c == 'r')
    o->owner_root = 1;
  else
    return -1;
  return 0;
}

static int layer_pack(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"keep-mtime", no_argument, NULL, 'k'},
                                       {"owner-root", no_argument, NULL, 'r'},
                                       CLI_COMMON_LONGOPTS};
  st_pack_opts po = {.mtime = cli_source_date_epoch()};
  int rc = cli_parse_opts(ctx, argc, argv, opts, pack_usage, pack_opt, &po);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(pack_usage, "expected one directory");
  const char *dir = argv[optind];
  _cleanup_(st_store_freep) st_store *s = NULL;
  if ((rc = cli_open_store(ctx, ST_STORE_CREATE, &s)))
    return rc;
  st_error err = {0};
  _cleanup_(st_layer_writer_freep) st_layer_writer *w = NULL;
  if (st_layer_writer_new(&w, s, cli_threads(ctx), &err) < 0)
    return cli_fail(&err);
  st_progress *prog = st_progress_new("packing", 0, !ctx->quiet && st_progress_wanted());
  po.progress = progress_cb;
  po.progress_ud = prog;
  double t0 = st_now();
  rc = st_layer_pack_dir(w, dir, &po, &err);
  st_digest d;
  if (rc == ST_OK)
    rc = st_layer_writer_finish(w, &d, NULL, &err);
  st_progress_free(prog);
  if (rc < 0)
    return cli_fail(&err);
  double secs = st_now() - t0;
  const st_pack_stats *ps = st_layer_writer_stats(w);
  char a[16], b[16], hex[ST_DIGEST_HEX_LEN + 1];
  if (!ctx->quiet) {
    fprintf(stderr,
            "packed %s: %llu files, %llu dirs, %llu symlinks, %llu hardlinks%s; %s in %.2f s "
            "(%.0f MB/s)\n",
            dir, (unsigned long long)ps->files, (unsigned long long)ps->dirs,
            (unsigned long long)ps->symlinks, (unsigned long long)ps->hardlinks,
            ps->skipped ? " (special files skipped)" : "", st_format_bytes(ps->bytes, a, sizeof a),
            secs, secs > 0 ? (double)ps->bytes / secs / 1e6 : 0.0);
    fprintf(stderr, "chunks: %llu referenced, %llu new (%s stored)\n",
            (unsigned long long)ps->chunks, (unsigned long long)ps->chunks_new,
            st_format_bytes(ps->bytes_new_stored, b, sizeof b));
  }
  printf("sha256:%s\n", st_digest_hex(&d, hex));
  return CLI_EXIT_OK;
}

static int load_index(st_store *s, const char *text, st_layer_index **out) {
  st_error err = {0};
  st_digest d;
  if (st_digest_parse(&d, text, &err) < 0)
    return cli_fail(&err);
  if (st_layer_index_load(out, s, &d, &err) < 0)
    return cli_fail(&err);
  return CLI_EXIT_OK;
}

static int unpack_opt(int c, const char *arg, void *ud) {
  if (c != 'n')
    return -1;
  ((st_unpack_opts *)ud)->chown = 0;
  return 0;
}

static int layer_unpack(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"no-chown", no_argument, NULL, 'n'}, CLI_COMMON_LONGOPTS};
  st_unpack_opts uo = st_unpack_opts_default();
  int rc = cli_parse_opts(ctx, argc, argv, opts, unpack_usage, unpack_opt, &uo);
  if (rc)
    return rc;
  if (argc - optind != 2)
    return cli_usage_error(unpack_usage, "expected a layer digest and a destination");
  uo.threads = cli_threads(ctx);
  _cleanup_(st_store_freep) st_store *s = NULL;
  _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)) || (rc = load_index(s, argv[optind], &idx)))
    return rc;
  st_progress *prog = st_progress_new("unpacking", st_layer_index_content_bytes(idx),
                                      !ctx->quiet && st_progress_wanted());
  uo.progress = progress_cb;
  uo.progress_ud = prog;
  st_unpack_stats us;
  st_error err = {0};
  double t0 = st_now();
  rc = st_layer_unpack(s, idx, argv[optind + 1], &uo, &us, &err);
  st_progress_free(prog);
  if (rc < 0)
    return cli_fail(&err);
  char a[16];
  if (!ctx->quiet)
    fprintf(stderr, "unpacked %llu files, %llu dirs, %llu symlinks, %llu hardlinks, %s in %.2f s%s\n",
            (unsigned long long)us.files, (unsigned long long)us.dirs,
            (unsigned long long)us.symlinks, (unsigned long long)us.hardlinks,
            st_format_bytes(us.bytes, a, sizeof a), st_now() - t0,
            us.xattrs_skipped ? " (some xattrs could not be set)" : "");
  return CLI_EXIT_OK;
}

static void mode_string(const st_entry *e, char out[11]) {
  static const char types[] = "?-dlhw";
  static const char rwx[] = "rwxrwxrwx";
  out[0] = types[e->type <= ST_ENTRY_WHITEOUT ? e->type : 0];
  for (int i = 0; i < 9; i++)
    out[1 + i] = (e->mode & (0400u >> i)) ? rwx[i] : '-';
  if (e->mode & 04000)
    out[3] = (e->mode & 0100) ? 's' : 'S';
  if (e->mode & 02000)
    out[6] = (e->mode & 0010) ? 's' : 'S';
  if (e->mode & 01000)
    out[9] = (e->mode & 0001) ? 't' : 'T';
  out[10] = '\0';
}

static void print_entry(const char *prefix, const st_entry *e) {
  char mode[11];
  mode_string(e, mode);
  printf("%s%s %5u/%-5u %12llu /%s", prefix, mode, e->uid, e->gid, (unsigned long long)e->size,
         e->path);
  if (e->type == ST_ENTRY_SYMLINK)
    printf(" -> %s", e->target);
  else if (e->type == ST_ENTRY_HARDLINK)
    printf(" link to /%s", e->target);
  else if (e->type == ST_ENTRY_WHITEOUT)
    printf(" (whiteout)");
  if (e->opaque)
    printf(" (opaque)");
  putchar('\n');
}

static int layer_ls(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, ls_usage, NULL, NULL);
  if (rc)
    return rc;
  if (argc - optind != 1)
    return cli_usage_error(ls_usage, "expected one layer digest");
  _cleanup_(st_store_freep) st_store *s = NULL;
  _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)) || (rc = load_index(s, argv[optind], &idx)))
    return rc;
  for (size_t i = 0; i < st_layer_index_count(idx); i++)
    print_entry("", st_layer_index_entry(idx, i));
  return CLI_EXIT_OK;
}

static int diff_line(const st_entry *a, const st_entry *b, unsigned changes, void *ud) {
  unsigned long *counts = ud;
  if (!a) {
    print_entry("+ ", b);
    counts[0]++;
  } else if (!b) {
    print_entry("- ", a);
    counts[1]++;
  } else {
    static const char *const names[] = {"type", "content", "mode", "owner",
                                        "mtime", "target", "xattrs"};
    printf("M /%s (", b->path);
    const char *sep = "";
    for (unsigned i = 0; i < 7; i++)
      if (changes & (1u << i)) {
        printf("%s%s", sep, names[i]);
        sep = ",";
      }
    printf(")\n");
    counts[2]++;
  }
  return 0;
}

static int layer_diff(cli_ctx *ctx, int argc, char **argv) {
  static const struct option opts[] = {CLI_COMMON_LONGOPTS};
  int rc = cli_parse_opts(ctx, argc, argv, opts, diff_usage, NULL, NULL);
  if (rc)
    return rc;
  if (argc - optind != 2)
    return cli_usage_error(diff_usage, "expected two layer digests");
  _cleanup_(st_store_freep) st_store *s = NULL;
  _cleanup_(st_layer_index_freep) st_layer_index *a = NULL;
  _cleanup_(st_layer_index_freep) st_layer_index *b = NULL;
  if ((rc = cli_open_store(ctx, 0, &s)) || (rc = load_index(s, argv[optind], &a)) ||
      (rc = load_index(s, argv[optind + 1], &b)))
    return rc;
  unsigned long counts[3] = {0, 0, 0};
  st_layer_index_diff(a, b, diff_line, counts);
  if (!ctx->quiet)
    fprintf(stderr, "%lu added, %lu removed, %lu modified\n", counts[0], counts[1], counts[2]);
  return CLI_EXIT_OK;
}

int cmd_layer(cli_ctx *ctx, int argc, char **argv) {
  static const char usage[] = "strata layer pack|unpack|ls|diff ...";
  if (argc < 2)
    return cli_usage_error(usage, "missing subcommand");
  const char *sub = argv[1];
  if (!strcmp(sub, "pack"))
    return layer_pack(ctx, argc - 1, argv + 1);
  if (!strcmp(sub, "unpack"))
    return layer_unpack(ctx, argc - 1, argv + 1);
  if (!strcmp(sub, "ls"))
    return layer_ls(ctx, argc - 1, argv + 1);
  if (!strcmp(sub, "diff"))
    return layer_diff(ctx, argc - 1, argv + 1);
  return cli_usage_error(usage, "unknown subcommand '%s'", sub);
}
