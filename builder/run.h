/* SPDX-License-Identifier: Apache-2.0 */
/* `run` steps: shell commands executed in a bubblewrap sandbox over a
 * directory holding the composed image tree, without network, with the
 * image's environment. */
#pragma once

#include <stddef.h>

#include "error.h"
#include "image.h"

/* Receives each line the command prints (stdout and stderr, in order). */
typedef void (*st_run_log_fn)(const char *line, void *ud);

/* Runs `/bin/sh -c cmd` for each command in turn with root as "/", a fresh
 * /proc, /dev and /tmp, all namespaces unshared (no network), the
 * environment cleared and set to env (sorted key/values), working directory
 * "/". Stops at the first failing command: ST_EIO "run step 'CMD' exited
 * with status N" (or "was killed by signal N"). ST_ENOENT if bwrap is not
 * installed. Mount points bwrap needs (proc, dev, tmp) are created in root
 * if missing and removed again afterwards when still empty. */
int st_run_commands(const char *root, char *const *cmds, size_t n, const st_kv *env,
                    size_t n_env, st_run_log_fn log, void *ud, st_error *err);
