/* SPDX-License-Identifier: Apache-2.0 */
#include "filemap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dset.h"
#include "fs.h"

/* record: key (32) | object checksum (32) | first 8 bytes of sha256(key|csum) */
#define REC 72

struct st_filemap {
  char *path;
  st_dset *index; /* key -> position in csums */
  uint8_t (*csums)[32];
  size_t n, cap;
};

static void check_value(uint8_t out[8], const uint8_t *rec) {
  st_digest d;
  st_sha256(&d, rec, 64);
  memcpy(out, d.bytes, 8);
}

/* Fills buf unless the file ends first: bytes read, or -errno. */
static ssize_t read_full(int fd, uint8_t *buf, size_t len) {
  size_t have = 0;
  while (have < len) {
    ssize_t r = read(fd, buf + have, len - have);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    if (r == 0)
      break;
    have += (size_t)r;
  }
  return (ssize_t)have;
}

static int put(st_filemap *m, const st_digest *key, const uint8_t *csum) {
  uint64_t at;
  if (st_dset_get(m->index, key, &at)) {
    memcpy(m->csums[at], csum, 32); /* the newest record wins */
    return ST_OK;
  }
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 1024;
    uint8_t(*v)[32] = realloc(m->csums, cap * sizeof *v);
    if (!v)
      return ST_ENOMEM;
    m->csums = v;
    m->cap = cap;
  }
  memcpy(m->csums[m->n], csum, 32);
  if (st_dset_insert(m->index, key, m->n) < 0)
    return ST_ENOMEM;
  m->n++;
  return ST_OK;
}

int st_filemap_open(st_filemap **out, const char *path, st_error *err) {
  st_filemap *m = calloc(1, sizeof *m);
  if (!m || !(m->path = strdup(path)) || !(m->index = st_dset_new())) {
    st_filemap_free(m);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) {
    int e = errno;
    st_filemap_free(m);
    return st_error_errno(err, e, "node file map %s", path);
  }
  uint8_t buf[REC * 256];
  int rc = ST_OK;
  for (ssize_t got; fd >= 0 && rc == ST_OK;) {
    got = read_full(fd, buf, sizeof buf);
    if (got < 0) {
      rc = st_error_errno(err, -(int)got, "node file map %s", path);
      break;
    }
    for (ssize_t off = 0; off + REC <= got && rc == ST_OK; off += REC) {
      uint8_t cv[8];
      check_value(cv, buf + off);
      if (memcmp(cv, buf + off + 64, 8))
        continue; /* damaged: that file is simply written again */
      st_digest key;
      memcpy(key.bytes, buf + off, 32);
      if (put(m, &key, buf + off + 32) < 0)
        rc = st_error_set(err, ST_ENOMEM, "out of memory");
    }
    if (got < (ssize_t)sizeof buf)
      break; /* end of file; a torn last record is ignored */
  }
  if (fd >= 0)
    close(fd);
  if (rc < 0) {
    st_filemap_free(m);
    return rc;
  }
  *out = m;
  return ST_OK;
}

void st_filemap_free(st_filemap *m) {
  if (!m)
    return;
  st_dset_free(m->index);
  free(m->csums);
  free(m->path);
  free(m);
}

const uint8_t *st_filemap_get(const st_filemap *m, const st_digest *key) {
  uint64_t at;
  return st_dset_get(m->index, key, &at) ? m->csums[at] : NULL;
}

int st_filemap_add(st_filemap *m, const st_digest *keys, const uint8_t (*csums)[32], size_t n,
                   st_error *err) {
  if (n == 0)
    return ST_OK;
  uint8_t *buf = malloc(n * REC);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    uint8_t *rec = buf + i * REC;
    memcpy(rec, keys[i].bytes, 32);
    memcpy(rec + 32, csums[i], 32);
    check_value(rec + 64, rec);
  }
  int rc = ST_OK;
  int fd = open(m->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    rc = st_error_errno(err, errno, "node file map %s", m->path);
  else {
    /* A torn earlier append would misalign this one: start on a record. */
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size % REC && ftruncate(fd, st.st_size - st.st_size % REC) < 0)
      rc = st_error_errno(err, errno, "node file map %s", m->path);
    int w = rc == ST_OK ? st_write_all(fd, buf, n * REC) : 0;
    if (rc == ST_OK && (w < 0 || fdatasync(fd) < 0))
      rc = st_error_errno(err, w < 0 ? -w : errno, "node file map %s", m->path);
    close(fd);
  }
  for (size_t i = 0; rc == ST_OK && i < n; i++)
    if (put(m, &keys[i], csums[i]) < 0)
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
  free(buf);
  return rc;
}
