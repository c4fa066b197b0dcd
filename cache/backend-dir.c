/* SPDX-License-Identifier: Apache-2.0 */
/* The on-disk store. Objects are plain files named by the hex digest in 256
 * fan-out folders; a put writes DIR/tmp/<hex>.<kind>.<pid>.<n>, and flush
 * makes all staged files durable with one syncfs(2) before renaming each into
 * place, and a second syncfs makes the new names durable. */
#include "backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "dset.h"
#include "fs.h"
#include "log.h"

#define FLUSH_COUNT 4096
#define FLUSH_BYTES (256ull << 20)

struct pending {
  st_kind kind;
  st_digest digest;
  char tmp[96];
};

typedef struct {
  st_backend base;
  char *path;
  int rootfd;
  pthread_mutex_t lock;
  struct pending *pending;
  size_t n_pending, cap_pending, cap_publishing;
  uint64_t pending_bytes;
  st_dset *pending_set[ST_KIND_COUNT]; /* digest -> index into pending */
  /* Being published by a flush (outside `lock`): still "present". */
  pthread_mutex_t flush_lock;
  struct pending *publishing;
  size_t n_publishing;
  st_dset *publishing_set[ST_KIND_COUNT];
  long pid;
} dir_backend;

/* Temp names are unique per process, across every open store. */
static atomic_ulong tmp_counter;

static const char *const kind_dirs[] = {"chunks", "indexes", "manifests"};
static const char *const kind_names[] = {"chunk", "index", "manifest"};

const char *st_kind_dir(st_kind k) { return k < ST_KIND_COUNT ? kind_dirs[k] : "?"; }
const char *st_kind_name(st_kind k) { return k < ST_KIND_COUNT ? kind_names[k] : "object"; }

static void object_path(char *buf, size_t len, st_kind k, const st_digest *d) {
  char hex[ST_DIGEST_HEX_LEN + 1];
  st_digest_hex(d, hex);
  snprintf(buf, len, "%s/%.2s/%s", kind_dirs[k], hex, hex);
}

/* Reads a whole object. Objects bounded by a small max (chunks) are read
 * straight into a max-sized buffer, skipping the fstat; a short read of a
 * regular file means end of file. */
static int dir_read(int dirfd, const char *path, size_t max, uint8_t **data, size_t *len,
                    const char *what, st_error *err) {
  _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT)
      return st_error_set(err, ST_ENOENT, "%s not found", what);
    return st_error_errno(err, errno, "%s", what);
  }
  size_t cap = max + 1;
  if (max > (4u << 20)) {
    struct stat st;
    if (fstat(fd, &st) < 0)
      return st_error_errno(err, errno, "%s", what);
    if ((uint64_t)st.st_size > max)
      return st_error_set(err, ST_ELIMIT, "%s: stored size %lld exceeds the limit of %zu", what,
                          (long long)st.st_size, max);
    cap = (size_t)st.st_size + 1;
  }
  uint8_t *buf = malloc(cap);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "%s: out of memory", what);
  ssize_t n;
  do
    n = pread(fd, buf, cap, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    int e = errno;
    free(buf);
    return st_error_errno(err, e, "%s", what);
  }
  if ((size_t)n > max) {
    free(buf);
    return st_error_set(err, ST_ELIMIT, "%s: stored size exceeds the limit of %zu", what, max);
  }
  if ((size_t)n == cap) { /* grew since fstat: never for immutable objects */
    free(buf);
    return st_error_set(err, ST_ECORRUPT, "%s: changed while being read", what);
  }
  buf[n] = 0;
  *data = buf;
  *len = (size_t)n;
  return ST_OK;
}

static int dir_get(st_backend *b, st_kind k, const st_digest *d, size_t max, uint8_t **data,
                   size_t *len, st_error *err) {
  dir_backend *db = (dir_backend *)b;
  char path[PATH_MAX], hex[ST_DIGEST_HEX_LEN + 1], what[128];
  snprintf(what, sizeof what, "%s %s", kind_names[k], st_digest_hex(d, hex));
  pthread_mutex_lock(&db->lock);
  uint64_t idx;
  bool staged = st_dset_get(db->pending_set[k], d, &idx);
  if (staged)
    snprintf(path, sizeof path, "tmp/%s", db->pending[idx].tmp);
  pthread_mutex_unlock(&db->lock);
  if (staged) {
    int rc = dir_read(db->rootfd, path, max, data, len, what, err);
    if (rc != ST_ENOENT)
      return rc;
    /* published meanwhile: read it from its final place */
  }
  object_path(path, sizeof path, k, d);
  return dir_read(db->rootfd, path, max, data, len, what, err);
}

static int dir_has(st_backend *b, st_kind k, const st_digest *d, st_error *err) {
  dir_backend *db = (dir_backend *)b;
  pthread_mutex_lock(&db->lock);
  bool staged = st_dset_get(db->pending_set[k], d, NULL) ||
                st_dset_get(db->publishing_set[k], d, NULL);
  pthread_mutex_unlock(&db->lock);
  if (staged)
    return 1;
  char path[PATH_MAX];
  object_path(path, sizeof path, k, d);
  struct stat st;
  if (fstatat(db->rootfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0)
    return 1;
  if (errno == ENOENT)
    return 0;
  return st_error_errno(err, errno, "%s", path);
}

/* Renames one staged file into place, creating its fan-out folder if needed. */
static int publish(dir_backend *db, const struct pending *p, st_error *err) {
  char path[PATH_MAX], tmp[128], hex[ST_DIGEST_HEX_LEN + 1];
  object_path(path, sizeof path, p->kind, &p->digest);
  snprintf(tmp, sizeof tmp, "tmp/%s", p->tmp);
  st_digest_hex(&p->digest, hex);
  for (int attempt = 0;; attempt++) {
    if (renameat(db->rootfd, tmp, db->rootfd, path) == 0)
      break;
    if (errno != ENOENT || attempt > 0)
      return st_error_errno(err, errno, "store %s: rename %s", db->path, path);
    char sub[64];
    snprintf(sub, sizeof sub, "%s/%.2s", kind_dirs[p->kind], hex);
    if (mkdirat(db->rootfd, kind_dirs[p->kind], 0755) < 0 && errno != EEXIST)
      return st_error_errno(err, errno, "store %s: mkdir %s", db->path, kind_dirs[p->kind]);
    if (mkdirat(db->rootfd, sub, 0755) < 0 && errno != EEXIST)
      return st_error_errno(err, errno, "store %s: mkdir %s", db->path, sub);
  }
  return ST_OK;
}

/* Makes the staged objects durable (one syncfs), then visible (renames),
 * then their names durable (a second syncfs). Runs
 * outside `lock`, so other threads keep staging meanwhile; flush_lock keeps
 * flushes in order. */
static int flush(dir_backend *db, st_error *err) {
  pthread_mutex_lock(&db->flush_lock);
  pthread_mutex_lock(&db->lock);
  struct pending *batch = db->pending;
  size_t n = db->n_pending;
  db->pending = db->publishing;
  db->publishing = batch;
  db->n_publishing = n;
  size_t cap = db->cap_pending;
  db->cap_pending = db->cap_publishing;
  db->cap_publishing = cap;
  db->n_pending = 0;
  db->pending_bytes = 0;
  for (int k = 0; k < ST_KIND_COUNT; k++) {
    st_dset *t = db->publishing_set[k];
    db->publishing_set[k] = db->pending_set[k];
    db->pending_set[k] = t;
    st_dset_clear(db->pending_set[k]);
  }
  pthread_mutex_unlock(&db->lock);

  int rc = ST_OK;
  if (n > 0 && syncfs(db->rootfd) < 0)
    rc = st_error_errno(err, errno, "store %s: syncfs", db->path);
  size_t i = 0;
  for (; i < n && rc == ST_OK; i++)
    rc = publish(db, &batch[i], err);
  if (rc < 0) { /* drop what could not be published; nothing half-visible */
    for (size_t j = i ? i - 1 : 0; j < n; j++) {
      char tmp[128];
      snprintf(tmp, sizeof tmp, "tmp/%s", batch[j].tmp);
      unlinkat(db->rootfd, tmp, 0);
    }
  }
  /* The new names: one more syncfs instead of an fsync per folder touched
   * (up to 256 per kind), which cost more than the data itself. */
  if (rc == ST_OK && n > 0 && syncfs(db->rootfd) < 0)
    rc = st_error_errno(err, errno, "store %s: syncfs", db->path);
  pthread_mutex_lock(&db->lock);
  db->n_publishing = 0;
  for (int k = 0; k < ST_KIND_COUNT; k++)
    st_dset_clear(db->publishing_set[k]);
  pthread_mutex_unlock(&db->lock);
  pthread_mutex_unlock(&db->flush_lock);
  return rc;
}

static int dir_put(st_backend *b, st_kind k, const st_digest *d, const void *data, size_t len,
                   st_error *err) {
  dir_backend *db = (dir_backend *)b;
  char hex[ST_DIGEST_HEX_LEN + 1], name[96], tmp[128];
  st_digest_hex(d, hex);
  pthread_mutex_lock(&db->lock);
  bool staged = st_dset_get(db->pending_set[k], d, NULL);
  pthread_mutex_unlock(&db->lock);
  if (staged)
    return ST_OK;
  unsigned long n = atomic_fetch_add(&tmp_counter, 1);
  snprintf(name, sizeof name, "%s.%d.%ld.%lu", hex, (int)k, db->pid, n);
  snprintf(tmp, sizeof tmp, "tmp/%s", name);
  int fd = openat(db->rootfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return st_error_errno(err, errno, "store %s: %s %s", db->path, kind_names[k], hex);
  int rc = st_write_all(fd, data, len);
  if (close(fd) < 0 && rc == 0)
    rc = -errno;
  if (rc < 0) {
    unlinkat(db->rootfd, tmp, 0);
    return st_error_errno(err, -rc, "store %s: write %s %s", db->path, kind_names[k], hex);
  }
  pthread_mutex_lock(&db->lock);
  if (db->n_pending == db->cap_pending) {
    size_t cap = db->cap_pending ? db->cap_pending * 2 : 256;
    struct pending *np = realloc(db->pending, cap * sizeof *np);
    if (!np) {
      pthread_mutex_unlock(&db->lock);
      unlinkat(db->rootfd, tmp, 0);
      return st_error_set(err, ST_ENOMEM, "store: out of memory");
    }
    db->pending = np;
    db->cap_pending = cap;
  }
  if (st_dset_insert(db->pending_set[k], d, db->n_pending) == 0) {
    pthread_mutex_unlock(&db->lock); /* another thread staged it meanwhile */
    unlinkat(db->rootfd, tmp, 0);
    return ST_OK;
  }
  struct pending *p = &db->pending[db->n_pending++];
  p->kind = k;
  p->digest = *d;
  snprintf(p->tmp, sizeof p->tmp, "%s", name);
  db->pending_bytes += len;
  bool full = db->n_pending >= FLUSH_COUNT || db->pending_bytes >= FLUSH_BYTES;
  pthread_mutex_unlock(&db->lock);
  return full ? flush(db, err) : ST_OK;
}

static int dir_flush(st_backend *b, st_error *err) {
  return flush((dir_backend *)b, err);
}

static int dir_del(st_backend *b, st_kind k, const st_digest *d, st_error *err) {
  dir_backend *db = (dir_backend *)b;
  char path[PATH_MAX];
  object_path(path, sizeof path, k, d);
  if (unlinkat(db->rootfd, path, 0) < 0)
    return st_error_errno(err, errno, "store %s: delete %s", db->path, path);
  return ST_OK;
}

static bool parse_hex_name(const char *name, st_digest *d) {
  return strlen(name) == ST_DIGEST_HEX_LEN && st_digest_parse(d, name, NULL) == ST_OK;
}

static int dir_list(st_backend *b, st_kind k, st_backend_list_cb cb, void *ud, st_error *err) {
  dir_backend *db = (dir_backend *)b;
  for (unsigned fan = 0; fan < 256; fan++) {
    char sub[64];
    snprintf(sub, sizeof sub, "%s/%02x", kind_dirs[k], fan);
    int fd = openat(db->rootfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        continue;
      return st_error_errno(err, errno, "store %s: %s", db->path, sub);
    }
    DIR *dir = fdopendir(fd);
    if (!dir) {
      close(fd);
      return st_error_errno(err, errno, "store %s: %s", db->path, sub);
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(dir))) {
      if (de->d_name[0] == '.')
        continue;
      st_digest d;
      struct stat st;
      if (!parse_hex_name(de->d_name, &d) || (unsigned)d.bytes[0] != fan) {
        st_warn("store %s: ignoring stray file %s/%s", db->path, sub, de->d_name);
        continue;
      }
      if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        continue; /* deleted meanwhile */
      rc = cb(&d, (uint64_t)st.st_size, ud);
    }
    closedir(dir);
    if (rc)
      return rc;
  }
  return ST_OK;
}

static bool meta_name_ok(const char *name) {
  if (!*name || name[0] == '/' || strlen(name) > 200)
    return false;
  for (const char *p = name; *p; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '/' || c == ':' || c == '+';
    if (!ok)
      return false;
  }
  return !strstr(name, "..") && !strstr(name, "//") && name[strlen(name) - 1] != '/';
}

static int dir_meta_get(st_backend *b, const char *name, size_t max, uint8_t **data, size_t *len,
                        st_error *err) {
  dir_backend *db = (dir_backend *)b;
  if (!meta_name_ok(name))
    return st_error_set(err, ST_EINVAL, "invalid metadata name '%s'", name);
  char what[256];
  snprintf(what, sizeof what, "%s/%s", db->path, name);
  return dir_read(db->rootfd, name, max, data, len, what, err);
}

static int dir_meta_put(st_backend *b, const char *name, const void *data, size_t len,
                        st_error *err) {
  dir_backend *db = (dir_backend *)b;
  if (!meta_name_ok(name))
    return st_error_set(err, ST_EINVAL, "invalid metadata name '%s'", name);
  const char *slash = strrchr(name, '/');
  if (slash) {
    char parent[256];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - name), name);
    int rc = st_mkdir_p(db->rootfd, parent, 0755, err);
    if (rc < 0)
      return rc;
  }
  int rc = st_write_file_atomic(db->rootfd, name, data, len, 0644, err);
  return rc < 0 ? st_error_prefix(err, "store %s", db->path) : ST_OK;
}

static int dir_meta_del(st_backend *b, const char *name, st_error *err) {
  dir_backend *db = (dir_backend *)b;
  if (!meta_name_ok(name))
    return st_error_set(err, ST_EINVAL, "invalid metadata name '%s'", name);
  if (unlinkat(db->rootfd, name, 0) < 0)
    return errno == ENOENT ? st_error_set(err, ST_ENOENT, "%s not found", name)
                           : st_error_errno(err, errno, "store %s: delete %s", db->path, name);
  return ST_OK;
}

static int list_meta_dir(dir_backend *db, char *path, size_t len, size_t cap,
                         int (*cb)(const char *, void *), void *ud, st_error *err) {
  int fd = openat(db->rootfd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? ST_OK : st_error_errno(err, errno, "store %s: %s", db->path, path);
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return st_error_errno(err, errno, "store %s: %s", db->path, path);
  }
  struct dirent *de;
  int rc = ST_OK;
  while (rc == ST_OK && (de = readdir(d))) {
    if (de->d_name[0] == '.' || strstr(de->d_name, ".tmp."))
      continue;
    size_t nl = strlen(de->d_name);
    if (len + 1 + nl + 1 > cap)
      continue;
    path[len] = '/';
    memcpy(path + len + 1, de->d_name, nl + 1);
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISDIR(st.st_mode))
        rc = list_meta_dir(db, path, len + 1 + nl, cap, cb, ud, err);
      else if (S_ISREG(st.st_mode))
        rc = cb(path, ud);
    }
    path[len] = '\0';
  }
  closedir(d);
  return rc;
}

static int dir_meta_list(st_backend *b, const char *prefix, int (*cb)(const char *, void *),
                         void *ud, st_error *err) {
  dir_backend *db = (dir_backend *)b;
  if (!meta_name_ok(prefix))
    return st_error_set(err, ST_EINVAL, "invalid metadata name '%s'", prefix);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", prefix);
  return list_meta_dir(db, path, strlen(path), sizeof path, cb, ud, err);
}

static void dir_free(st_backend *b) {
  dir_backend *db = (dir_backend *)b;
  /* Unflushed puts are dropped: their temp files are removed. */
  for (size_t i = 0; i < db->n_pending; i++) {
    char tmp[128];
    snprintf(tmp, sizeof tmp, "tmp/%s", db->pending[i].tmp);
    unlinkat(db->rootfd, tmp, 0);
  }
  for (int k = 0; k < ST_KIND_COUNT; k++) {
    st_dset_free(db->pending_set[k]);
    st_dset_free(db->publishing_set[k]);
  }
  free(db->pending);
  free(db->publishing);
  pthread_mutex_destroy(&db->flush_lock);
  if (db->rootfd >= 0)
    close(db->rootfd);
  pthread_mutex_destroy(&db->lock);
  free(db->path);
  free(db);
}

static const st_backend_ops dir_ops = {
    .name = "dir",
    .get = dir_get,
    .has = dir_has,
    .put = dir_put,
    .del = dir_del,
    .list = dir_list,
    .flush = dir_flush,
    .meta_get = dir_meta_get,
    .meta_put = dir_meta_put,
    .meta_del = dir_meta_del,
    .meta_list = dir_meta_list,
    .free = dir_free,
};

/* Removes temp files left by processes that no longer run (kill -9). */
static void clean_stale_tmp(dir_backend *db) {
  int fd = openat(db->rootfd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  DIR *dir = fdopendir(fd);
  if (!dir) {
    close(fd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(dir))) {
    long pid = 0;
    int kind;
    char hex[65];
    if (sscanf(de->d_name, "%64[0-9a-f].%d.%ld.", hex, &kind, &pid) != 3 || pid <= 0)
      continue;
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
      st_debug("store %s: removing stale temp file %s", db->path, de->d_name);
      unlinkat(dirfd(dir), de->d_name, 0);
    }
  }
  closedir(dir);
}

int st_backend_dir_open(st_backend **out, const char *path, int create, st_error *err) {
  if (create) {
    int rc = st_mkdir_p(AT_FDCWD, path, 0755, err);
    if (rc < 0)
      return rc;
  }
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return st_error_errno(err, errno, "store %s", path);
  dir_backend *db = calloc(1, sizeof *db);
  if (!db) {
    close(fd);
    return st_error_set(err, ST_ENOMEM, "store: out of memory");
  }
  db->base.ops = &dir_ops;
  db->rootfd = fd;
  db->path = strdup(path);
  db->pid = (long)getpid();
  pthread_mutex_init(&db->lock, NULL);
  pthread_mutex_init(&db->flush_lock, NULL);
  bool sets_ok = true;
  for (int k = 0; k < ST_KIND_COUNT; k++) {
    db->pending_set[k] = st_dset_new();
    db->publishing_set[k] = st_dset_new();
    sets_ok = sets_ok && db->pending_set[k] && db->publishing_set[k];
  }
  if (!db->path || !sets_ok) {
    dir_free(&db->base);
    return st_error_set(err, ST_ENOMEM, "store: out of memory");
  }
  if (mkdirat(fd, "tmp", 0755) < 0 && errno != EEXIST && errno != EROFS && errno != EACCES) {
    int e = errno;
    dir_free(&db->base);
    return st_error_errno(err, e, "store %s: mkdir tmp", path);
  }
  clean_stale_tmp(db);
  *out = &db->base;
  return ST_OK;
}
