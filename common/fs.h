/* SPDX-License-Identifier: Apache-2.0 */
/* Small file-system helpers shared by every module: full reads and writes,
 * directory fsync, recursive mkdir, and a size-capped whole-file read. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* write(2) until len bytes are written; returns 0 or -errno. */
int st_write_all(int fd, const void *buf, size_t len);
/* pread(2) until len bytes are read or EOF; returns bytes read or -errno. */
ssize_t st_pread_all(int fd, void *buf, size_t len, off_t off);
/* Reads a whole file at dirfd/path (at most max bytes; larger is ST_ELIMIT).
 * *out is malloc'd (owned by caller, NUL-terminated for convenience). */
int st_read_file_at(int dirfd, const char *path, size_t max, uint8_t **out, size_t *len_out,
                    st_error *err);
/* mkdir -p relative to dirfd (AT_FDCWD allowed), mode for created dirs. */
int st_mkdir_p(int dirfd, const char *path, mode_t mode, st_error *err);
/* fsync the directory at dirfd/path. */
int st_fsync_dir_at(int dirfd, const char *path, st_error *err);
/* Writes data to dirfd/path atomically: temp file in the same directory,
 * fsync, rename, fsync of the directory. */
int st_write_file_atomic(int dirfd, const char *path, const void *data, size_t len, mode_t mode,
                         st_error *err);
/* Monotonic clock in seconds. */
double st_now(void);
