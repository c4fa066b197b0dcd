/* SPDX-License-Identifier: Apache-2.0 */
/* The project-wide error model: pinned ST_E* codes, a one-line message per
 * code, a gRPC status per code, and a caller-owned st_error carrying the
 * code plus a one-line detail message. */
#pragma once

#include <stddef.h>

/* Pinned values: never renumber, only append. tests/common/test-error.c checks
 * that every code has a name, a message and a gRPC status. */
typedef enum {
  ST_OK = 0,
  ST_EINVAL = -1,       /* invalid argument or usage */
  ST_ENOMEM = -2,       /* out of memory */
  ST_EIO = -3,          /* I/O error */
  ST_ENOENT = -4,       /* object or file not found */
  ST_EEXIST = -5,       /* already exists */
  ST_ECORRUPT = -6,     /* stored data fails verification */
  ST_EFORMAT = -7,      /* malformed input (parse error) */
  ST_EUNSAFE = -8,      /* path escapes its root or is otherwise unsafe */
  ST_ENOSPC = -9,       /* no space left on device */
  ST_EVERSION = -10,    /* unsupported format version */
  ST_EUNSUPPORTED = -11,/* unsupported feature or file type */
  ST_ECANCELED = -12,   /* operation canceled */
  ST_EPERM = -13,       /* permission denied */
  ST_EBUSY = -14,       /* resource busy or locked */
  ST_EAUTH = -15,       /* missing or wrong credentials */
  ST_ETIMEOUT = -16,    /* deadline exceeded */
  ST_EUNAVAIL = -17,    /* service unavailable */
  ST_ELIMIT = -18,      /* a size or count limit was exceeded */
} st_code;

#define ST_CODE_MIN ST_ELIMIT

/* Detail travels here. msg is one line, no trailing newline. */
typedef struct {
  int code;
  char msg[1024];
} st_error;

/* "EINVAL" style name of a code; "E?" for an unknown code. Never NULL. */
const char *st_code_name(int code);
/* One-line generic message for a code ("data corrupt"); never NULL. */
const char *st_code_message(int code);
/* The gRPC status code (grpc_status_code numbering) a code maps to. */
int st_code_grpc_status(int code);
/* Maps an errno value to the closest ST_E* code. */
int st_code_from_errno(int errnum);

/* Sets err (nullable) to code and a printf-formatted detail; returns code. */
int st_error_set(st_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Like st_error_set, with the code taken from errnum and ": strerror(errnum)"
 * appended to the message. Returns the mapped code. */
int st_error_errno(st_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes the existing message with "prefix: ". Returns err->code. */
int st_error_prefix(st_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void st_error_clear(st_error *err);
