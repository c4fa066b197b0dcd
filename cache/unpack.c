/* SPDX-License-Identifier: Apache-2.0 */
/* Layer unpack. Pass 1 (caller's thread, path order): directories and
 * symlinks are created, regular files are handed to the pool, which fetches,
 * verifies and writes them. Pass 2: hardlinks. Pass 3 (reverse path order):
 * directory ownership, modes, xattrs and mtimes, children before parents. */
#include "unpack.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cleanup.h"
#include "fs.h"
#include "log.h"
#include "pool.h"

struct unpack {
  st_store *store;
  const st_layer_index *idx;
  const char *dest; /* for messages */
  int destfd;
  st_unpack_opts opts;
  pthread_mutex_t lock;
  atomic_bool failed;
  atomic_bool warned_xattr;
  st_error first_err;
  atomic_uint_fast64_t files, bytes, xattrs_skipped;
  uid_t euid;
  gid_t egid;
  mode_t umask;
};

/* A directory fd shared by the file jobs of one folder; closed by the last. */
struct dirref {
  int fd;
  atomic_int refs;
};

struct file_job {
  struct unpack *u;
  const st_entry *e;
  struct dirref *parent;
  const char *name; /* last component of e->path */
};

static void dirref_put(struct dirref *r) {
  if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
    close(r->fd);
    free(r);
  }
}

st_unpack_opts st_unpack_opts_default(void) {
  return (st_unpack_opts){.threads = st_cpu_count(), .chown = geteuid() == 0};
}

static void fail(struct unpack *u, const st_error *e) {
  pthread_mutex_lock(&u->lock);
  if (!u->failed) {
    u->first_err = *e;
    u->failed = true;
  }
  pthread_mutex_unlock(&u->lock);
}

/* Opens the directory dir (a relative path, "" for DEST) below destfd, one
 * component at a time, refusing symlinks and non-directories. shown is the
 * entry path used in messages. */
static int open_dir(struct unpack *u, const char *dir, size_t dirlen, const char *shown,
                    int *fd_out, st_error *err) {
  int fd = dup(u->destfd);
  if (fd < 0)
    return st_error_errno(err, errno, "%s", u->dest);
  size_t off = 0;
  while (off < dirlen) {
    const char *p = dir + off;
    const char *slash = memchr(p, '/', dirlen - off);
    size_t len = slash ? (size_t)(slash - p) : dirlen - off;
    char comp[ST_NAME_MAX + 1];
    memcpy(comp, p, len);
    comp[len] = '\0';
    int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close(fd);
    size_t upto = off + len;
    if (next < 0) {
      if (e == ELOOP || e == ENOTDIR)
        return st_error_set(err, ST_EUNSAFE, "%s/%s: '%.*s' is a symlink or not a directory",
                            u->dest, shown, (int)upto, dir);
      return st_error_errno(err, e, "%s/%.*s", u->dest, (int)upto, dir);
    }
    fd = next;
    off = upto + 1;
  }
  *fd_out = fd;
  return ST_OK;
}

/* Opens the directory holding path; *name points into path. */
static int open_parent(struct unpack *u, const char *path, int *fd_out, const char **name,
                       st_error *err) {
  const char *slash = strrchr(path, '/');
  size_t dirlen = slash ? (size_t)(slash - path) : 0;
  *name = slash ? slash + 1 : path;
  return open_dir(u, path, dirlen, path, fd_out, err);
}

static void set_xattrs(struct unpack *u, int fd, const st_entry *e) {
  for (size_t i = 0; i < e->n_xattrs; i++) {
    const st_xattr *x = &e->xattrs[i];
    if (fsetxattr(fd, x->name, x->value, x->len, 0) == 0)
      continue;
    u->xattrs_skipped++;
    if (!atomic_exchange(&u->warned_xattr, true))
      st_warn("%s/%s: cannot set xattr %s (%s); further failures are counted, not shown",
              u->dest, e->path, x->name, strerror(errno));
  }
}

static int write_chunks(struct unpack *u, int fd, const st_entry *e, st_error *err) {
  for (size_t i = 0; i < e->n_chunks; i++) {
    const st_chunk_ref *c = &e->chunks[i];
    _cleanup_free_ uint8_t *data = NULL;
    size_t len;
    int rc = st_store_get(u->store, ST_KIND_CHUNK, &c->digest, &data, &len, err);
    if (rc < 0)
      return st_error_prefix(err, "unpack /%s", e->path);
    if (len != c->size) {
      char hex[ST_DIGEST_HEX_LEN + 1];
      return st_error_set(err, ST_ECORRUPT, "unpack /%s: chunk %s holds %zu bytes, index says %u",
                          e->path, st_digest_hex(&c->digest, hex), len, c->size);
    }
    int w = st_write_all(fd, data, len);
    if (w < 0)
      return st_error_errno(err, -w, "write %s/%s", u->dest, e->path);
    u->bytes += len;
  }
  return ST_OK;
}

static int write_file(struct unpack *u, const st_entry *e, int pfd, const char *name,
                      st_error *err) {
  /* Created with its final permission bits when umask allows; chmod after
   * chown otherwise (chown clears set-id bits). */
  bool do_chown = u->opts.chown && (e->uid != u->euid || e->gid != u->egid);
  bool do_chmod = do_chown || (e->mode & 07000) || (e->mode & u->umask);
  _cleanup_close_ int fd = -1;
  for (int attempt = 0; attempt < 2; attempt++) {
    fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, e->mode & 0777);
    if (fd >= 0 || errno != EEXIST || attempt > 0)
      break;
    if (unlinkat(pfd, name, 0) < 0)
      return st_error_errno(err, errno, "replace %s/%s", u->dest, e->path);
  }
  if (fd < 0)
    return st_error_errno(err, errno, "create %s/%s", u->dest, e->path);
  int rc = write_chunks(u, fd, e, err);
  if (rc < 0)
    return rc;
  if (do_chown && fchown(fd, e->uid, e->gid) < 0)
    return st_error_errno(err, errno, "chown %s/%s", u->dest, e->path);
  if (do_chmod && fchmod(fd, e->mode) < 0)
    return st_error_errno(err, errno, "chmod %s/%s", u->dest, e->path);
  set_xattrs(u, fd, e);
  struct timespec ts[2] = {{e->mtime, 0}, {e->mtime, 0}};
  if (futimens(fd, ts) < 0)
    return st_error_errno(err, errno, "set mtime of %s/%s", u->dest, e->path);
  int cfd = ST_TAKE_FD(fd);
  if (close(cfd) < 0)
    return st_error_errno(err, errno, "write %s/%s", u->dest, e->path);
  u->files++;
  return ST_OK;
}

static void file_job_run(void *arg) {
  struct file_job *j = arg;
  if (!j->u->failed) {
    st_error e = {0};
    if (write_file(j->u, j->e, j->parent->fd, j->name, &e) < 0)
      fail(j->u, &e);
  }
  dirref_put(j->parent);
  free(j);
}

static int make_dir(struct unpack *u, const st_entry *e, st_error *err) {
  _cleanup_close_ int pfd = -1;
  const char *name;
  int rc = open_parent(u, e->path, &pfd, &name, err);
  if (rc < 0)
    return rc;
  if (mkdirat(pfd, name, 0700) == 0)
    return ST_OK;
  if (errno != EEXIST)
    return st_error_errno(err, errno, "mkdir %s/%s", u->dest, e->path);
  _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return st_error_set(err, ST_EUNSAFE, "%s/%s exists and is a symlink or not a directory",
                        u->dest, e->path);
  return ST_OK;
}

/* Symlinks and hardlinks: create, replacing a non-directory of that name. */
static int make_link(struct unpack *u, const st_entry *e, st_error *err) {
  _cleanup_close_ int pfd = -1, tpfd = -1;
  const char *name, *tname = NULL;
  int rc = open_parent(u, e->path, &pfd, &name, err);
  if (rc < 0)
    return rc;
  if (e->type == ST_ENTRY_HARDLINK && (rc = open_parent(u, e->target, &tpfd, &tname, err)) < 0)
    return rc;
  for (int attempt = 0; attempt < 2; attempt++) {
    int r = e->type == ST_ENTRY_SYMLINK ? symlinkat(e->target, pfd, name)
                                        : linkat(tpfd, tname, pfd, name, 0);
    if (r == 0)
      break;
    if (errno != EEXIST || attempt > 0)
      return st_error_errno(err, errno, "link %s/%s", u->dest, e->path);
    if (unlinkat(pfd, name, 0) < 0)
      return st_error_errno(err, errno, "replace %s/%s", u->dest, e->path);
  }
  if (e->type == ST_ENTRY_SYMLINK) {
    if (u->opts.chown && fchownat(pfd, name, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0)
      return st_error_errno(err, errno, "chown %s/%s", u->dest, e->path);
    struct timespec ts[2] = {{e->mtime, 0}, {e->mtime, 0}};
    if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
      return st_error_errno(err, errno, "set mtime of %s/%s", u->dest, e->path);
    u->xattrs_skipped += e->n_xattrs;
  }
  return ST_OK;
}

static int finish_dir(struct unpack *u, const st_entry *e, st_error *err) {
  _cleanup_close_ int fd = -1;
  if (e->path[0] == '\0') {
    fd = dup(u->destfd);
  } else {
    _cleanup_close_ int pfd = -1;
    const char *name;
    int rc = open_parent(u, e->path, &pfd, &name, err);
    if (rc < 0)
      return rc;
    fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0)
    return st_error_errno(err, errno, "%s/%s", u->dest, e->path);
  if (u->opts.chown && fchown(fd, e->uid, e->gid) < 0)
    return st_error_errno(err, errno, "chown %s/%s", u->dest, e->path);
  if (fchmod(fd, e->mode) < 0)
    return st_error_errno(err, errno, "chmod %s/%s", u->dest, e->path);
  set_xattrs(u, fd, e);
  struct timespec ts[2] = {{e->mtime, 0}, {e->mtime, 0}};
  if (futimens(fd, ts) < 0)
    return st_error_errno(err, errno, "set mtime of %s/%s", u->dest, e->path);
  return ST_OK;
}

static int check_failed(struct unpack *u, st_error *err) {
  if (!u->failed)
    return ST_OK;
  return st_error_set(err, u->first_err.code, "%s", u->first_err.msg);
}

static int run_passes(struct unpack *u, st_pool *pool, st_unpack_stats *stats, st_error *err) {
  const st_layer_index *idx = u->idx;
  size_t n = st_layer_index_count(idx);
  uint64_t total = st_layer_index_content_bytes(idx);
  int rc = ST_OK;
  struct dirref *parent = NULL; /* the folder of the last file handed out */
  const char *parent_path = NULL;
  size_t parent_len = 0;
  for (size_t i = 1; i < n && rc == ST_OK && !u->failed; i++) {
    const st_entry *e = st_layer_index_entry(idx, i);
    switch (e->type) {
    case ST_ENTRY_DIR:
      rc = make_dir(u, e, err);
      stats->dirs++;
      break;
    case ST_ENTRY_SYMLINK:
      rc = make_link(u, e, err);
      stats->symlinks++;
      break;
    case ST_ENTRY_REGULAR: {
      const char *slash = strrchr(e->path, '/');
      size_t dirlen = slash ? (size_t)(slash - e->path) : 0;
      if (!parent || dirlen != parent_len || memcmp(parent_path, e->path, dirlen)) {
        dirref_put(parent);
        parent = calloc(1, sizeof *parent);
        if (!parent)
          return st_error_set(err, ST_ENOMEM, "out of memory");
        parent->refs = 1;
        if ((rc = open_dir(u, e->path, dirlen, e->path, &parent->fd, err)) < 0) {
          free(parent);
          parent = NULL;
          break;
        }
        parent_path = e->path;
        parent_len = dirlen;
      }
      struct file_job *j = malloc(sizeof *j);
      if (!j) {
        rc = st_error_set(err, ST_ENOMEM, "out of memory");
        break;
      }
      atomic_fetch_add(&parent->refs, 1);
      *j = (struct file_job){u, e, parent, slash ? slash + 1 : e->path};
      st_pool_submit(pool, file_job_run, j);
      break;
    }
    default: /* hardlinks below; whiteouts only matter when composing */
      break;
    }
    if (u->opts.progress)
      u->opts.progress(u->bytes, total, u->opts.progress_ud);
  }
  dirref_put(parent);
  st_pool_wait(pool);
  if (rc == ST_OK)
    rc = check_failed(u, err);
  for (size_t i = 1; i < n && rc == ST_OK; i++) {
    const st_entry *e = st_layer_index_entry(idx, i);
    if (e->type == ST_ENTRY_HARDLINK) {
      rc = make_link(u, e, err);
      stats->hardlinks++;
    }
  }
  for (size_t i = n; i-- > 0 && rc == ST_OK;)
    if (st_layer_index_entry(idx, i)->type == ST_ENTRY_DIR)
      rc = finish_dir(u, st_layer_index_entry(idx, i), err);
  stats->files = u->files;
  stats->bytes = u->bytes;
  stats->xattrs_skipped = u->xattrs_skipped;
  return rc;
}

int st_layer_unpack(st_store *s, const st_layer_index *idx, const char *dest,
                    const st_unpack_opts *opts, st_unpack_stats *stats_out, st_error *err) {
  char tmp[PATH_MAX];
  bool fresh = false;
  struct stat st;
  if (lstat(dest, &st) < 0) {
    if (errno != ENOENT)
      return st_error_errno(err, errno, "%s", dest);
    if (snprintf(tmp, sizeof tmp, "%s.strata-tmp-%ld", dest, (long)getpid()) >= (int)sizeof tmp)
      return st_error_set(err, ST_EINVAL, "%s: path too long", dest);
    if (mkdir(tmp, 0700) < 0)
      return st_error_errno(err, errno, "mkdir %s", tmp);
    fresh = true;
  } else if (!S_ISDIR(st.st_mode)) {
    return st_error_set(err, ST_EEXIST, "%s exists and is not a directory", dest);
  }
  struct unpack u = {.store = s, .idx = idx, .dest = dest, .opts = *opts};
  u.euid = geteuid();
  u.egid = getegid();
  u.umask = umask(022);
  umask(u.umask);
  u.destfd = open(fresh ? tmp : dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (u.destfd < 0) {
    int e = errno;
    if (fresh)
      rmdir(tmp);
    return st_error_errno(err, e, "%s", dest);
  }
  pthread_mutex_init(&u.lock, NULL);
  st_unpack_stats stats = {0};
  st_pool *pool = NULL;
  int rc = st_pool_new(&pool, opts->threads, opts->threads * 4, err);
  if (rc == ST_OK)
    rc = run_passes(&u, pool, &stats, err);
  st_pool_free(pool);
  close(u.destfd);
  pthread_mutex_destroy(&u.lock);
  if (fresh && rc == ST_OK && rename(tmp, dest) < 0)
    rc = st_error_errno(err, errno, "rename %s to %s", tmp, dest);
  if (fresh && rc < 0)
    st_remove_tree(AT_FDCWD, tmp, NULL);
  if (rc == ST_OK && stats_out)
    *stats_out = stats;
  return rc;
}

static int make_writable(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  if (flag == FTW_D)
    chmod(path, 0700); /* so that a 0555 directory can be emptied */
  return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int st_remove_tree(int dirfd, const char *path, st_error *err) {
  char full[PATH_MAX];
  if (dirfd != AT_FDCWD && path[0] != '/') {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(proc, full, sizeof full - 1);
    if (n < 0)
      return st_error_errno(err, errno, "%s", path);
    full[n] = '\0';
    size_t len = (size_t)n;
    snprintf(full + len, sizeof full - len, "/%s", path);
  } else {
    snprintf(full, sizeof full, "%s", path);
  }
  nftw(full, make_writable, 32, FTW_PHYS);
  if (nftw(full, rm_one, 32, FTW_DEPTH | FTW_PHYS) < 0)
    return st_error_errno(err, errno, "remove %s", full);
  return ST_OK;
}
