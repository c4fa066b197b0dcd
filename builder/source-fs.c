/* SPDX-License-Identifier: Apache-2.0 */
/* File-system sources: a directory tree (through the cache's tree packer,
 * laid under a destination), a single file, and the stat-only digest of a
 * tree used in build cache keys. */
#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "source-private.h"

#define FILE_BUF (256u << 10)

int st_src_dest(const char *dest, char **out, st_error *err) {
  if (!dest)
    dest = "/";
  size_t len = strlen(dest);
  char *p = malloc(len + 1);
  if (!p)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  size_t n = 0;
  for (const char *s = dest; *s; s++) {
    if (*s == '/' && (n == 0 || p[n - 1] == '/'))
      continue; /* leading or repeated */
    p[n++] = *s;
  }
  if (n > 0 && p[n - 1] == '/')
    n--;
  p[n] = '\0';
  int rc = st_path_check(p, err);
  if (rc < 0) {
    free(p);
    return st_error_prefix(err, "destination '%s'", dest);
  }
  *out = p;
  return ST_OK;
}

int st_source_dir(st_layer_writer *w, const char *dir, const st_source_opts *o, st_error *err) {
  _cleanup_free_ char *dest = NULL;
  int rc = st_src_dest(o->dest, &dest, err);
  if (rc < 0)
    return st_error_prefix(err, "dir %s", dir);
  st_pack_opts po = {
      .mtime = o->mtime,
      .owner_root = o->owner == ST_OWNER_ROOT,
      .owner_fixed = o->owner == ST_OWNER_FIXED,
      .uid = o->uid,
      .gid = o->gid,
      .dest = dest,
  };
  return st_layer_pack_dir(w, dir, &po, err);
}

/* Streams fd into the open file of w and into hasher (nullable). */
static int stream_fd(st_layer_writer *w, int fd, const char *path, st_hasher *hasher,
                     st_error *err) {
  _cleanup_free_ uint8_t *buf = malloc(FILE_BUF);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (;;) {
    ssize_t n = read(fd, buf, FILE_BUF);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return st_error_errno(err, errno, "read %s", path);
    if (n == 0)
      return ST_OK;
    if (hasher)
      st_hasher_update(hasher, buf, (size_t)n);
    int rc = st_layer_writer_write(w, buf, (size_t)n, err);
    if (rc < 0)
      return rc;
  }
}

int st_source_file(st_layer_writer *w, const char *path, const st_source_opts *o,
                   st_error *err) {
  _cleanup_free_ char *dest = NULL;
  int rc = st_src_dest(o->dest, &dest, err);
  if (rc < 0)
    return st_error_prefix(err, "file %s", path);
  if (!*dest)
    return st_error_set(err, ST_EINVAL, "file %s: the destination must be a file path, not '/'",
                        path);
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return st_error_errno(err, errno, "open %s", path);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return st_error_errno(err, errno, "stat %s", path);
  if (!S_ISREG(st.st_mode))
    return st_error_set(err, ST_EINVAL, "file %s: not a regular file", path);
  st_entry e = {
      .type = ST_ENTRY_REGULAR,
      .path = ST_TAKE_PTR(dest),
      .mode = (o->has_mode ? o->mode : st.st_mode) & 07777,
      .uid = o->owner == ST_OWNER_FIXED ? o->uid : o->owner == ST_OWNER_SOURCE ? st.st_uid : 0,
      .gid = o->owner == ST_OWNER_FIXED ? o->gid : o->owner == ST_OWNER_SOURCE ? st.st_gid : 0,
      .mtime = o->mtime,
  };
  if ((rc = st_layer_writer_begin_file(w, &e, err)) < 0)
    return rc;
  if ((rc = stream_fd(w, fd, path, o->hasher, err)) < 0)
    return rc; /* the caller drops the writer */
  return st_layer_writer_end_file(w, err);
}

/* ---- stat-only digest ---- */

static int name_cmp(const FTSENT **a, const FTSENT **b) {
  return strcmp((*a)->fts_name, (*b)->fts_name);
}

static char type_char(mode_t m) {
  return S_ISREG(m)    ? 'f'
         : S_ISDIR(m)  ? 'd'
         : S_ISLNK(m)  ? 'l'
         : S_ISFIFO(m) ? 'p'
         : S_ISSOCK(m) ? 's'
         : S_ISCHR(m)  ? 'c'
                       : 'b';
}

/* Hashes one entry as "<type> <mode> <uid> <gid> <size> <mtime ns>
 * <len>:<path> <len>:<target>\n" (lengths make any byte in a name safe). */
static int digest_entry(st_hasher *h, const FTSENT *ent, const char *rel, st_error *err) {
  const struct stat *st = ent->fts_statp;
  char target[PATH_MAX + 1] = "";
  if (S_ISLNK(st->st_mode)) {
    ssize_t n = readlink(ent->fts_accpath, target, PATH_MAX);
    if (n < 0)
      return st_error_errno(err, errno, "readlink %s", ent->fts_path);
    target[n] = '\0';
  }
  int64_t ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  char line[128];
  uint64_t size = S_ISDIR(st->st_mode) ? 0 : (uint64_t)st->st_size; /* dir sizes are noise */
  int n = snprintf(line, sizeof line, "%c %o %u %u %" PRIu64 " %" PRId64 " %zu:",
                   type_char(st->st_mode), (unsigned)(st->st_mode & 07777), (unsigned)st->st_uid,
                   (unsigned)st->st_gid, size, ns, strlen(rel));
  st_hasher_update(h, line, (size_t)n);
  st_hasher_update(h, rel, strlen(rel));
  n = snprintf(line, sizeof line, " %zu:", strlen(target));
  st_hasher_update(h, line, (size_t)n);
  st_hasher_update(h, target, strlen(target));
  st_hasher_update(h, "\n", 1);
  return ST_OK;
}

static void fts_closep(FTS **f) {
  if (*f)
    fts_close(*f);
}

static void hasher_freep(st_hasher **h) {
  st_hasher_free(*h);
}

int st_source_dir_digest(const char *dir, st_digest *out, st_error *err) {
  char *const roots[] = {(char *)dir, NULL};
  size_t rootlen = strlen(dir);
  while (rootlen > 0 && dir[rootlen - 1] == '/')
    rootlen--;
  _cleanup_(hasher_freep) st_hasher *h = st_hasher_new();
  if (!h)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  _cleanup_(fts_closep) FTS *fts = fts_open(roots, FTS_PHYSICAL | FTS_NOCHDIR, name_cmp);
  if (!fts)
    return st_error_errno(err, errno, "%s", dir);
  st_hasher_update(h, "strata-dir-digest-v1\n", 21);
  FTSENT *ent;
  errno = 0;
  while ((ent = fts_read(fts))) {
    switch (ent->fts_info) {
    case FTS_DP:
      continue;
    case FTS_DNR:
    case FTS_ERR:
    case FTS_NS:
      return st_error_errno(err, ent->fts_errno, "%s", ent->fts_path);
    case FTS_DC:
      return st_error_set(err, ST_EFORMAT, "%s: directory cycle", ent->fts_path);
    default:
      break;
    }
    const char *rel = ent->fts_level == 0 ? "" : ent->fts_path + rootlen + 1;
    int rc = digest_entry(h, ent, rel, err);
    if (rc < 0)
      return rc;
    errno = 0;
  }
  if (errno)
    return st_error_errno(err, errno, "walk %s", dir);
  st_hasher_final(h, out);
  return ST_OK;
}
