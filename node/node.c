/* SPDX-License-Identifier: Apache-2.0 */
/* The node directory: opening it, its lock, image names and checkouts.
 * No OSTree here (node-repo.c opens the repo on demand), so that `env run`
 * links without libostree and GLib (cli/meson.build). */
#include "node.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "node-private.h"
#include "unpack.h"

char *st_node_default_dir(void) {
  const char *env = getenv("STRATA_NODE_DIR");
  if (env && *env)
    return strdup(env);
  if (geteuid() == 0)
    return strdup("/var/lib/strata/node");
  char *out = NULL;
  const char *xdg = getenv("XDG_DATA_HOME");
  const char *home = getenv("HOME");
  if (xdg && *xdg) {
    if (asprintf(&out, "%s/strata/node", xdg) < 0)
      return NULL;
  } else if (asprintf(&out, "%s/.local/share/strata/node", home ? home : ".") < 0)
    return NULL;
  return out;
}

int st_node_open(st_node **out, const char *dir, bool create, st_error *err) {
  struct stat st;
  if (stat(dir, &st) < 0) {
    if (errno != ENOENT || !create)
      return st_error_errno(err, errno, "node %s", dir);
  }
  static const char *const parts[] = {"", "checkouts", "used", "run"};
  for (size_t i = 0; create && i < ST_ARRAY_SIZE(parts); i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, parts[i]);
    int rc = st_mkdir_p(AT_FDCWD, path, 0755, err);
    if (rc < 0)
      return st_error_prefix(err, "node %s", dir);
  }
  /* absolute: environments chdir into it and bwrap takes paths below it */
  char *abs = realpath(dir, NULL);
  if (!abs)
    return st_error_errno(err, errno, "node %s", dir);
  st_node *n = calloc(1, sizeof *n);
  if (!n || !(n->dir = abs)) {
    free(abs);
    free(n);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  n->lock_fd = -1;
  char path[4096];
  snprintf(path, sizeof path, "%s/cache", dir);
  int rc = st_store_open(&n->cache, path, create ? ST_STORE_CREATE : 0, err);
  if (rc < 0) {
    st_node_free(n);
    return st_error_prefix(err, "node %s", dir);
  }
  *out = n;
  return ST_OK;
}

void st_node_free(st_node *n) {
  if (!n)
    return;
  st_node_unlock(n);
  if (n->repo)
    n->repo_free(n->repo);
  st_store_free(n->cache);
  free(n->dir);
  free(n);
}

const char *st_node_dir(const st_node *n) { return n->dir; }
st_store *st_node_cache(st_node *n) { return n->cache; }

static pid_t lock_holder(int fd) {
  char buf[32] = {0};
  ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
  return r > 0 ? (pid_t)atol(buf) : 0;
}

/* Staging checkouts (and repo) of a killed run. */
static void clean_staging(st_node *n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/checkouts", n->dir);
  int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)))
    if (strncmp(de->d_name, ".tmp-", 5) == 0)
      st_remove_tree(dirfd(d), de->d_name, NULL);
  closedir(d);
  /* a repo being created when the process died */
  d = opendir(n->dir);
  if (!d)
    return;
  while ((de = readdir(d)))
    if (strncmp(de->d_name, "repo.tmp-", 9) == 0)
      st_remove_tree(dirfd(d), de->d_name, NULL);
  closedir(d);
}

int st_node_lock(st_node *n, bool wait, void (*waiting)(pid_t holder, void *ud), void *ud,
                 st_error *err) {
  if (n->lock_fd >= 0)
    return ST_OK;
  char path[4096];
  snprintf(path, sizeof path, "%s/lock", n->dir);
  _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return st_error_errno(err, errno, "node lock %s", path);
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    if (errno != EWOULDBLOCK)
      return st_error_errno(err, errno, "node lock %s", path);
    pid_t holder = lock_holder(fd);
    if (!wait)
      return st_error_set(err, ST_EBUSY, "node %s is locked by another prewarm or gc (pid %ld)",
                          n->dir, (long)holder);
    if (waiting)
      waiting(holder, ud);
    while (flock(fd, LOCK_EX) < 0)
      if (errno != EINTR)
        return st_error_errno(err, errno, "node lock %s", path);
  }
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) == 0)
    (void)!pwrite(fd, buf, (size_t)len, 0);
  n->lock_fd = ST_TAKE_FD(fd);
  clean_staging(n);
  return ST_OK;
}

void st_node_unlock(st_node *n) {
  if (n->lock_fd >= 0) {
    (void)!ftruncate(n->lock_fd, 0);
    close(n->lock_fd);
    n->lock_fd = -1;
  }
}

char *st_node_checkout_path(const st_node *n, const st_digest *image) {
  char hex[ST_DIGEST_HEX_LEN + 1], *out = NULL;
  if (asprintf(&out, "%s/checkouts/%s", n->dir, st_digest_hex(image, hex)) < 0)
    return NULL;
  return out;
}

bool st_node_has_checkout(const st_node *n, const st_digest *image) {
  _cleanup_free_ char *p = st_node_checkout_path(n, image);
  struct stat st;
  return p && lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int st_node_resolve(st_node *n, const char *ref, st_digest *out, st_error *err) {
  st_digest d;
  int rc;
  if (strncmp(ref, "sha256:", 7) == 0)
    rc = st_digest_parse(&d, ref, err);
  else
    rc = st_image_resolve(n->cache, ref, &d, err);
  if (rc == ST_ENOENT)
    return st_error_set(err, ST_ENOENT, "image %s is not pre-warmed on node %s", ref, n->dir);
  if (rc < 0)
    return rc;
  if (!st_node_has_checkout(n, &d))
    return st_error_set(err, ST_ENOENT, "image %s is not pre-warmed on node %s", ref, n->dir);
  *out = d;
  return ST_OK;
}

void st_node_touch(st_node *n, const st_digest *image, bool only_if_missing) {
  char hex[ST_DIGEST_HEX_LEN + 1], path[4096];
  snprintf(path, sizeof path, "%s/used/%s", n->dir, st_digest_hex(image, hex));
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (only_if_missing ? O_EXCL : 0), 0644);
  if (fd < 0)
    return; /* best effort: a read-only node still runs environments */
  futimens(fd, NULL);
  close(fd);
}
