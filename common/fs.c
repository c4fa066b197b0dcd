/* SPDX-License-Identifier: Apache-2.0 */
/* File-system helpers: every write is checked, every read is bounded. */
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

int st_write_all(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (n == 0)
      return -EIO;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

ssize_t st_pread_all(int fd, void *buf, size_t len, off_t off) {
  uint8_t *p = buf;
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, p + got, len - got, off + (off_t)got);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (n == 0)
      break;
    got += (size_t)n;
  }
  return (ssize_t)got;
}

int st_read_file_at(int dirfd, const char *path, size_t max, uint8_t **out, size_t *len_out,
                    st_error *err) {
  _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return st_error_errno(err, errno, "%s", path);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return st_error_errno(err, errno, "%s", path);
  if (!S_ISREG(st.st_mode))
    return st_error_set(err, ST_EINVAL, "%s: not a regular file", path);
  if ((uint64_t)st.st_size > max)
    return st_error_set(err, ST_ELIMIT, "%s: %lld bytes exceeds the limit of %zu", path,
                        (long long)st.st_size, max);
  _cleanup_free_ uint8_t *buf = malloc((size_t)st.st_size + 1);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "%s: out of memory", path);
  ssize_t n = st_pread_all(fd, buf, (size_t)st.st_size, 0);
  if (n < 0)
    return st_error_errno(err, (int)-n, "%s", path);
  buf[n] = '\0';
  *len_out = (size_t)n;
  *out = ST_TAKE_PTR(buf);
  return ST_OK;
}

int st_mkdir_p(int dirfd, const char *path, mode_t mode, st_error *err) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return st_error_set(err, ST_EINVAL, "%s: path too long", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char saved = *p;
      *p = '\0';
      if (mkdirat(dirfd, buf, mode) < 0 && errno != EEXIST)
        return st_error_errno(err, errno, "mkdir %s", buf);
      *p = saved;
      if (saved == '\0')
        break;
    }
  }
  return ST_OK;
}

int st_fsync_dir_at(int dirfd, const char *path, st_error *err) {
  _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return st_error_errno(err, errno, "%s", path);
  if (fsync(fd) < 0)
    return st_error_errno(err, errno, "fsync %s", path);
  return ST_OK;
}

int st_write_file_atomic(int dirfd, const char *path, const void *data, size_t len, mode_t mode,
                         st_error *err) {
  char tmp[PATH_MAX], dir[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return st_error_set(err, ST_EINVAL, "%s: path too long", path);
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  else
    strcpy(dir, ".");
  int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return st_error_errno(err, errno, "%s", tmp);
  int rc = st_write_all(fd, data, len);
  if (rc == 0 && fsync(fd) < 0)
    rc = -errno;
  if (close(fd) < 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && renameat(dirfd, tmp, dirfd, path) < 0)
    rc = -errno;
  if (rc < 0) {
    unlinkat(dirfd, tmp, 0);
    return st_error_errno(err, -rc, "write %s", path);
  }
  return st_fsync_dir_at(dirfd, dir, err);
}

double st_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
