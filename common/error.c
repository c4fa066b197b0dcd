/* SPDX-License-Identifier: Apache-2.0 */
/* Error codes, their messages and status mappings, and st_error helpers. */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct code_info {
  const char *name;
  const char *message;
  int grpc; /* grpc_status_code */
};

/* Indexed by -code. gRPC numbering: OK 0, CANCELLED 1, UNKNOWN 2,
 * INVALID_ARGUMENT 3, DEADLINE_EXCEEDED 4, NOT_FOUND 5, ALREADY_EXISTS 6,
 * PERMISSION_DENIED 7, RESOURCE_EXHAUSTED 8, FAILED_PRECONDITION 9,
 * ABORTED 10, OUT_OF_RANGE 11, UNIMPLEMENTED 12, INTERNAL 13,
 * UNAVAILABLE 14, DATA_LOSS 15, UNAUTHENTICATED 16. */
static const struct code_info codes[] = {
    [0] = {"OK", "success", 0},
    [1] = {"EINVAL", "invalid argument", 3},
    [2] = {"ENOMEM", "out of memory", 8},
    [3] = {"EIO", "input/output error", 13},
    [4] = {"ENOENT", "not found", 5},
    [5] = {"EEXIST", "already exists", 6},
    [6] = {"ECORRUPT", "data corrupt", 15},
    [7] = {"EFORMAT", "malformed input", 3},
    [8] = {"EUNSAFE", "unsafe path", 3},
    [9] = {"ENOSPC", "no space left on device", 8},
    [10] = {"EVERSION", "unsupported format version", 9},
    [11] = {"EUNSUPPORTED", "not supported", 12},
    [12] = {"ECANCELED", "canceled", 1},
    [13] = {"EPERM", "permission denied", 7},
    [14] = {"EBUSY", "resource busy", 10},
    [15] = {"EAUTH", "unauthenticated", 16},
    [16] = {"ETIMEOUT", "deadline exceeded", 4},
    [17] = {"EUNAVAIL", "unavailable", 14},
    [18] = {"ELIMIT", "limit exceeded", 8},
};

static const struct code_info *lookup(int code) {
  if (code > 0 || code < ST_CODE_MIN)
    return NULL;
  return &codes[-code];
}

const char *st_code_name(int code) {
  const struct code_info *ci = lookup(code);
  return ci && ci->name ? ci->name : "E?";
}

const char *st_code_message(int code) {
  const struct code_info *ci = lookup(code);
  return ci && ci->message ? ci->message : "unknown error";
}

int st_code_grpc_status(int code) {
  const struct code_info *ci = lookup(code);
  return ci ? ci->grpc : 2;
}

int st_code_from_errno(int errnum) {
  switch (errnum) {
  case 0:
    return ST_OK;
  case ENOENT:
  case ENOTDIR:
    return ST_ENOENT;
  case EEXIST:
  case ENOTEMPTY:
    return ST_EEXIST;
  case ENOMEM:
    return ST_ENOMEM;
  case ENOSPC:
  case EDQUOT:
  case EFBIG:
    return ST_ENOSPC;
  case EACCES:
  case EPERM:
  case EROFS:
    return ST_EPERM;
  case EINVAL:
  case ENAMETOOLONG:
    return ST_EINVAL;
  case ELOOP:
    return ST_EUNSAFE;
  case EBUSY:
  case EWOULDBLOCK:
    return ST_EBUSY;
  case ENOTSUP:
    return ST_EUNSUPPORTED;
  case ETIMEDOUT:
    return ST_ETIMEOUT;
  case ECANCELED:
    return ST_ECANCELED;
  default:
    return ST_EIO;
  }
}

static void vset(st_error *err, int code, const char *fmt, va_list ap) {
  err->code = code;
  int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  if (n < 0)
    err->msg[0] = '\0';
  /* One line: fold any newline that came in through a formatted argument. */
  for (char *p = err->msg; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
}

int st_error_set(st_error *err, int code, const char *fmt, ...) {
  if (!err)
    return code;
  va_list ap;
  va_start(ap, fmt);
  vset(err, code, fmt, ap);
  va_end(ap);
  return code;
}

int st_error_errno(st_error *err, int errnum, const char *fmt, ...) {
  int code = st_code_from_errno(errnum);
  if (!err)
    return code;
  va_list ap;
  va_start(ap, fmt);
  vset(err, code, fmt, ap);
  va_end(ap);
  size_t len = strlen(err->msg);
  if (len < sizeof err->msg)
    snprintf(err->msg + len, sizeof err->msg - len, ": %s", strerror(errnum));
  return code;
}

int st_error_prefix(st_error *err, const char *fmt, ...) {
  if (!err)
    return ST_EINVAL;
  char prefix[512], old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
  return err->code;
}

void st_error_clear(st_error *err) {
  if (!err)
    return;
  err->code = ST_OK;
  err->msg[0] = '\0';
}
