/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the cmocka tests: temp directories owned by a fixture, small
 * file writers, and deterministic pseudo-random data. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above first */
#include <cmocka.h>

/* Creates a fresh directory under $TMPDIR (or /tmp); returns a malloc'd path. */
char *tu_mkdtemp(void);
/* rm -rf; asserts success. */
void tu_rmtree(const char *path);
/* Writes len bytes to dir/rel (creating parent dirs); asserts success. */
void tu_write(const char *dir, const char *rel, const void *data, size_t len);
/* Fills buf with deterministic pseudo-random bytes from seed. */
void tu_random(void *buf, size_t len, uint64_t seed);
/* Runs a shell command; returns its exit status. */
int tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
