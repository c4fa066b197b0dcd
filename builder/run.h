/* SPDX-License-Identifier: Apache-2.0 */
/* `run` steps: shell commands executed in a bubblewrap sandbox over a
 * directory holding the composed image tree, without network, with the
 * image's environment. */
#pragma once

#include <stdatomic.h>
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
 * if missing and removed again afterwards when still empty.
 * cancel (nullable) is polled while a command runs: once it is non-zero the
 * sandbox is killed and the result is ST_ECANCELED "run step 'CMD' was
 * cancelled". */
int st_run_commands(const char *root, char *const *cmds, size_t n, const st_kv *env,
                    size_t n_env, st_run_log_fn log, void *ud, const atomic_int *cancel,
                    st_error *err);

/* The directories of an overlay run (absolute paths, no ',' ':' '\\' or
 * '='; upper and work empty directories on the same file system; merged an
 * empty directory). lower must already hold the mount points bwrap needs
 * (proc, dev, tmp), so that mounting them changes nothing in upper. */
typedef struct {
  const char *lower, *upper, *work, *merged;
} st_run_overlay;

/* As st_run_commands, with "/" an overlay of upper over lower mounted at
 * merged in a private mount namespace of each command: lower is never
 * written, and upper ends up with everything the commands created or
 * changed (whole files and directories), whiteouts (0:0 character devices)
 * for what they deleted and directories marked opaque (trusted.overlay.
 * opaque "y") where they replaced a lower directory. Needs the right to
 * mount (CAP_SYS_ADMIN): without it ST_EUNSUPPORTED "cannot mount the
 * overlay" before any command has run. */
int st_run_commands_overlay(const st_run_overlay *ov, char *const *cmds, size_t n,
                            const st_kv *env, size_t n_env, st_run_log_fn log, void *ud,
                            const atomic_int *cancel, st_error *err);
