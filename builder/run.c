/* SPDX-License-Identifier: Apache-2.0 */
/* bubblewrap runner: fork, exec bwrap with the command, read its merged
 * output line by line, wait. */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"

#define BWRAP "bwrap"

/* The mount a child makes before exec (strings prepared by the parent). */
struct st_run_overlay_mount {
  const char *merged;
  char *options, *plain_options;
};

static const char *find_bwrap(void) {
  static const char *const candidates[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"};
  for (size_t i = 0; i < ST_ARRAY_SIZE(candidates); i++)
    if (access(candidates[i], X_OK) == 0)
      return candidates[i];
  return NULL;
}

/* argv for one command; strings point into env/cmd or static text. */
static char **bwrap_argv(const char *bwrap, const char *root, const char *cmd, const st_kv *env,
                         size_t n_env) {
  size_t n = 0, cap = 32 + 4 * n_env;
  char **argv = calloc(cap, sizeof *argv);
  if (!argv)
    return NULL;
  const char *fixed[] = {bwrap,   "--bind", root,     "/",          "--proc", "/proc", "--dev",
                         "/dev",  "--tmpfs", "/tmp",  "--unshare-all", "--die-with-parent",
                         "--new-session", "--clearenv", "--chdir", "/"};
  for (size_t i = 0; i < ST_ARRAY_SIZE(fixed); i++)
    argv[n++] = (char *)fixed[i];
  for (size_t i = 0; i < n_env; i++) {
    argv[n++] = (char *)"--setenv";
    argv[n++] = env[i].key;
    argv[n++] = env[i].value;
  }
  argv[n++] = (char *)"/bin/sh";
  argv[n++] = (char *)"-c";
  argv[n++] = (char *)cmd;
  argv[n] = NULL;
  return argv;
}

static void emit_lines(char *buf, size_t *len, bool flush_all, st_run_log_fn log, void *ud) {
  size_t start = 0;
  for (size_t i = 0; i < *len; i++) {
    if (buf[i] != '\n')
      continue;
    buf[i] = '\0';
    if (log)
      log(buf + start, ud);
    start = i + 1;
  }
  if (flush_all && start < *len) {
    buf[*len] = '\0';
    if (log)
      log(buf + start, ud);
    start = *len;
  }
  memmove(buf, buf + start, *len - start);
  *len -= start;
}

/* What the child reports through its status pipe when it fails before
 * bwrap runs: the stage and errno. */
enum { STAGE_MOUNT = 1, STAGE_EXEC = 2 };

/* In the child, before exec: a private mount namespace with the overlay
 * mounted at ov->merged. Only system calls (we are a fork of a threaded
 * process). */
static int child_mount(const struct st_run_overlay_mount *ov) {
  if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0)
    return -1;
  if (mount("overlay", ov->merged, "overlay", 0, ov->options) == 0)
    return 0;
  /* a kernel without one of the pinning options (they are its defaults) */
  if (errno == EINVAL && mount("overlay", ov->merged, "overlay", 0, ov->plain_options) == 0)
    return 0;
  return -1;
}

/* How often a running command looks at the cancel flag. */
#define CANCEL_POLL_MS 100

static bool cancelled(const atomic_int *cancel) {
  return cancel && atomic_load(cancel) != 0;
}

static int run_one(const char *bwrap, const char *root, const struct st_run_overlay_mount *ov,
                   const char *cmd, const st_kv *env, size_t n_env, st_run_log_fn log, void *ud,
                   const atomic_int *cancel, st_error *err) {
  if (cancelled(cancel))
    return st_error_set(err, ST_ECANCELED, "run step '%s' was cancelled", cmd);
  _cleanup_free_ char **argv = bwrap_argv(bwrap, root, cmd, env, n_env);
  if (!argv)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int pipefd[2], statfd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0)
    return st_error_errno(err, errno, "run step: pipe");
  if (pipe2(statfd, O_CLOEXEC) < 0) {
    int e = errno;
    close(pipefd[0]);
    close(pipefd[1]);
    return st_error_errno(err, e, "run step: pipe");
  }
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(pipefd[0]);
    close(pipefd[1]);
    close(statfd[0]);
    close(statfd[1]);
    return st_error_errno(err, e, "run step: fork");
  }
  if (pid == 0) {
    int report[2] = {STAGE_MOUNT, 0};
    if (ov && child_mount(ov) < 0) {
      report[1] = errno;
      (void)!write(statfd[1], report, sizeof report);
      _exit(127);
    }
    dup2(pipefd[1], STDOUT_FILENO);
    dup2(pipefd[1], STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, STDIN_FILENO);
    execv(bwrap, argv);
    report[0] = STAGE_EXEC;
    report[1] = errno;
    (void)!write(statfd[1], report, sizeof report);
    _exit(127);
  }
  close(pipefd[1]);
  close(statfd[1]);
  char buf[8193];
  size_t len = 0;
  bool killed = false;
  for (;;) {
    if (cancel) {
      /* bwrap is the sandbox's parent and its pid 1 dies with it
       * (--die-with-parent), so one SIGKILL ends every process inside */
      if (!killed && cancelled(cancel)) {
        kill(pid, SIGKILL);
        killed = true;
      }
      struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
      int pr = poll(&pfd, 1, killed ? -1 : CANCEL_POLL_MS);
      if (pr == 0 || (pr < 0 && errno == EINTR))
        continue;
    }
    ssize_t r = read(pipefd[0], buf + len, sizeof buf - 1 - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    len += (size_t)r;
    emit_lines(buf, &len, len == sizeof buf - 1, log, ud);
  }
  emit_lines(buf, &len, true, log, ud);
  close(pipefd[0]);
  int report[2] = {0, 0};
  ssize_t got;
  while ((got = read(statfd[0], report, sizeof report)) < 0 && errno == EINTR)
    ;
  close(statfd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return st_error_errno(err, errno, "run step: wait");
  if (killed)
    return st_error_set(err, ST_ECANCELED, "run step '%s' was cancelled", cmd);
  if (got == (ssize_t)sizeof report && report[0] == STAGE_MOUNT)
    return st_error_set(err, report[1] == EPERM || report[1] == ENODEV ? ST_EUNSUPPORTED : ST_EIO,
                        "run step: cannot mount the overlay on %s: %s", ov->merged,
                        strerror(report[1]));
  if (got == (ssize_t)sizeof report && report[0] == STAGE_EXEC)
    return st_error_errno(err, report[1], "run step: cannot execute %s", bwrap);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return ST_OK;
  if (WIFSIGNALED(status))
    return st_error_set(err, ST_EIO, "run step '%s' was killed by signal %d", cmd,
                        WTERMSIG(status));
  return st_error_set(err, ST_EIO, "run step '%s' exited with status %d", cmd,
                      WEXITSTATUS(status));
}

static int no_bwrap(st_error *err) {
  return st_error_set(err, ST_ENOENT,
                      "run steps need bubblewrap: 'bwrap' is not installed (apt-get install "
                      "bubblewrap)");
}

int st_run_commands(const char *root, char *const *cmds, size_t n, const st_kv *env,
                    size_t n_env, st_run_log_fn log, void *ud, const atomic_int *cancel,
                    st_error *err) {
  const char *bwrap = find_bwrap();
  if (!bwrap)
    return no_bwrap(err);
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return st_error_errno(err, errno, "%s", root);
  static const char *const mounts[] = {"proc", "dev", "tmp"};
  bool created[3] = {false, false, false};
  for (int i = 0; i < 3; i++)
    created[i] = mkdirat(rootfd, mounts[i], 0755) == 0;
  int rc = ST_OK;
  for (size_t i = 0; i < n && rc == ST_OK; i++) {
    st_debug("run: %s", cmds[i]);
    rc = run_one(bwrap, root, NULL, cmds[i], env, n_env, log, ud, cancel, err);
  }
  for (int i = 0; i < 3; i++)
    if (created[i])
      unlinkat(rootfd, mounts[i], AT_REMOVEDIR); /* fails, harmlessly, if not empty */
  close(rootfd);
  return rc;
}

/* Characters the overlay's mount options give a meaning to. */
static bool option_safe(const char *path) { return !strpbrk(path, ",:\\=\n"); }

int st_run_commands_overlay(const st_run_overlay *ov, char *const *cmds, size_t n,
                            const st_kv *env, size_t n_env, st_run_log_fn log, void *ud,
                            const atomic_int *cancel, st_error *err) {
  const char *bwrap = find_bwrap();
  if (!bwrap)
    return no_bwrap(err);
  const char *dirs[] = {ov->lower, ov->upper, ov->work, ov->merged};
  for (size_t i = 0; i < ST_ARRAY_SIZE(dirs); i++)
    if (!option_safe(dirs[i]))
      return st_error_set(err, ST_EUNSUPPORTED,
                          "run step: '%s' cannot be named in overlay mount options", dirs[i]);
  struct st_run_overlay_mount m = {.merged = ov->merged};
  /* Pinned: no redirects or metadata-only copy-ups, so that the upper
   * directory holds every changed file and directory in full. */
  if (asprintf(&m.options,
               "lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off,index=off",
               ov->lower, ov->upper, ov->work) < 0)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  if (asprintf(&m.plain_options, "lowerdir=%s,upperdir=%s,workdir=%s", ov->lower, ov->upper,
               ov->work) < 0) {
    free(m.options);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  int rc = ST_OK;
  for (size_t i = 0; i < n && rc == ST_OK; i++) {
    st_debug("run (overlay): %s", cmds[i]);
    rc = run_one(bwrap, ov->merged, &m, cmds[i], env, n_env, log, ud, cancel, err);
  }
  free(m.options);
  free(m.plain_options);
  return rc;
}
