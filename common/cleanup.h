/* SPDX-License-Identifier: Apache-2.0 */
/* Scope-bound cleanup helpers built on __attribute__((cleanup)), and
 * ST_TAKE_PTR/ST_TAKE_FD to hand ownership out of a scope. */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void st_freep(void *p) {
  free(*(void **)p);
}
static inline void st_closep(int *fd) {
  if (*fd >= 0) {
    int saved = errno;
    close(*fd);
    errno = saved;
  }
}
static inline void st_fclosep(FILE **f) {
  if (*f)
    fclose(*f);
}

#define _cleanup_free_ _cleanup_(st_freep)
#define _cleanup_close_ _cleanup_(st_closep)
#define _cleanup_fclose_ _cleanup_(st_fclosep)

/* Returns p and sets the variable to NULL, so its cleanup does nothing. */
#define ST_TAKE_PTR(p)                                                                             \
  ({                                                                                               \
    __typeof__(p) _taken = (p);                                                                    \
    (p) = NULL;                                                                                    \
    _taken;                                                                                        \
  })
#define ST_TAKE_FD(fd)                                                                             \
  ({                                                                                               \
    int _taken = (fd);                                                                             \
    (fd) = -1;                                                                                     \
    _taken;                                                                                        \
  })

/* Defines name##p(type **) calling func(*p) when non-NULL. */
#define ST_DEFINE_FREEP(type, func)                                                                \
  static inline void func##p(type **p) {                                                           \
    if (*p)                                                                                        \
      func(*p);                                                                                    \
  }

#define ST_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
