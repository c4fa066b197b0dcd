/* SPDX-License-Identifier: Apache-2.0 */
/* Environments: a command in a bubblewrap sandbox whose root is an overlay
 * of the image's read-only checkout and a private tmpfs, so the hardlinked
 * checkout is never written. The overlay is mounted in a mount namespace of
 * the child (as root; otherwise in a user namespace), then bwrap takes it
 * as its root. The parent holds a shared lock on the checkout (gc skips it)
 * and waits for the command.
 *
 * GPU: /dev/nvidia* and the NVIDIA driver's user-space libraries are bound
 * in when present (under $STRATA_GPU_ROOT, default /, for tests). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "node.h"

typedef struct {
  char **v;
  size_t n, cap;
  bool oom;
} strv;

static void strv_add(strv *a, const char *s) {
  if (a->oom)
    return;
  if (a->n + 2 > a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 64;
    char **nv = realloc(a->v, cap * sizeof *nv);
    if (!nv) {
      a->oom = true;
      return;
    }
    a->v = nv;
    a->cap = cap;
  }
  char *c = strdup(s);
  if (!c) {
    a->oom = true;
    return;
  }
  a->v[a->n++] = c;
  a->v[a->n] = NULL;
}

static void strv_free(strv *a) {
  for (size_t i = 0; i < a->n; i++)
    free(a->v[i]);
  free(a->v);
}

static const char *find_bwrap(void) {
  static const char *const candidates[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"};
  for (size_t i = 0; i < ST_ARRAY_SIZE(candidates); i++)
    if (access(candidates[i], X_OK) == 0)
      return candidates[i];
  return NULL;
}

/* NVIDIA devices and, when there is one, the driver libraries of the host,
 * bound at the same path. */
static void add_gpu(strv *a) {
  const char *root = getenv("STRATA_GPU_ROOT");
  if (!root || !*root)
    root = "";
  static const char *const devs[] = {"/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*"};
  static const char *const libs[] = {
      "/usr/lib/x86_64-linux-gnu/libcuda.so*",     "/usr/lib/x86_64-linux-gnu/libnvidia-*.so*",
      "/usr/lib/x86_64-linux-gnu/libnvcuvid.so*",  "/usr/lib64/libcuda.so*",
      "/usr/lib64/libnvidia-*.so*",                "/usr/lib/aarch64-linux-gnu/libcuda.so*",
      "/usr/lib/aarch64-linux-gnu/libnvidia-*.so*", "/usr/bin/nvidia-smi"};
  size_t nd = 0, nl = 0;
  for (size_t k = 0; k < ST_ARRAY_SIZE(devs) + ST_ARRAY_SIZE(libs); k++) {
    bool dev = k < ST_ARRAY_SIZE(devs);
    /* Driver libraries only with a device: without one they are of no use,
     * and globbing the large library folders costs a CPU machine's start. */
    if (!dev && nd == 0)
      break;
    const char *pat = dev ? devs[k] : libs[k - ST_ARRAY_SIZE(devs)];
    char full[4096];
    snprintf(full, sizeof full, "%s%s", root, pat);
    glob_t g;
    if (glob(full, 0, NULL, &g) != 0)
      continue;
    for (size_t i = 0; i < g.gl_pathc; i++) {
      const char *inside = g.gl_pathv[i] + strlen(root);
      if (dev && !strncmp(inside, "/dev/dri", 8))
        continue; /* only with an NVIDIA device */
      strv_add(a, dev ? "--dev-bind" : "--ro-bind");
      strv_add(a, g.gl_pathv[i]);
      strv_add(a, inside);
      dev ? nd++ : nl++;
    }
    globfree(&g);
  }
  if (nd || nl)
    st_info("gpu: %zu devices and %zu driver files bound in", nd, nl);
}

static int build_argv(strv *a, const char *bwrap, const char *root, const st_image *img,
                      const st_env_opts *opts) {
  strv_add(a, bwrap);
  const char *fixed[] = {"--bind", root, "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs",
                         "/tmp", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                         "--unshare-cgroup-try", "--die-with-parent", "--clearenv"};
  for (size_t i = 0; i < ST_ARRAY_SIZE(fixed); i++)
    strv_add(a, fixed[i]);
  for (size_t i = 0; i < img->n_env; i++) {
    strv_add(a, "--setenv");
    strv_add(a, img->env[i].key);
    strv_add(a, img->env[i].value);
  }
  if (!st_kv_get(img->env, img->n_env, "PATH")) {
    strv_add(a, "--setenv");
    strv_add(a, "PATH");
    strv_add(a, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  }
  const char *term = getenv("TERM");
  if (term) {
    strv_add(a, "--setenv");
    strv_add(a, "TERM");
    strv_add(a, term);
  }
  for (size_t i = 0; opts->env && opts->env[i]; i++) {
    const char *eq = strchr(opts->env[i], '=');
    if (!eq || eq == opts->env[i])
      return -1;
    char *key = strndup(opts->env[i], (size_t)(eq - opts->env[i]));
    strv_add(a, "--setenv");
    strv_add(a, key ? key : "");
    strv_add(a, eq + 1);
    free(key);
  }
  if (opts->gpu)
    add_gpu(a);
  const char *wd = opts->workdir ? opts->workdir : img->workdir;
  strv_add(a, "--chdir");
  strv_add(a, wd && *wd ? wd : "/");
  strv_add(a, "--");
  if (opts->cmd && opts->cmd[0]) {
    for (size_t i = 0; opts->cmd[i]; i++)
      strv_add(a, opts->cmd[i]);
  } else if (img->n_entrypoint) {
    for (size_t i = 0; i < img->n_entrypoint; i++)
      strv_add(a, img->entrypoint[i]);
  } else
    strv_add(a, "/bin/sh");
  return a->oom ? -1 : 0;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t w = write(fd, text, strlen(text));
  close(fd);
  return w == (ssize_t)strlen(text) ? 0 : -1;
}

/* In the child: a private mount namespace with the overlay at run/root. */
static void setup_overlay(const st_node *n, const char *hex) {
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (uid != 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
      fprintf(stderr, "strata: error: env run: user namespace: %s\n", strerror(errno));
      _exit(1);
    }
    char map[64];
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    write_file("/proc/self/setgroups", "deny");
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    write_file("/proc/self/gid_map", map);
  } else if (unshare(CLONE_NEWNS) < 0) {
    fprintf(stderr, "strata: error: env run: mount namespace: %s\n", strerror(errno));
    _exit(1);
  }
  if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 || chdir(st_node_dir(n)) < 0 ||
      mount("strata-env", "run", "tmpfs", MS_NODEV | MS_NOSUID, "mode=0755") < 0 ||
      mkdir("run/upper", 0755) < 0 || mkdir("run/work", 0755) < 0 ||
      mkdir("run/root", 0755) < 0) {
    fprintf(stderr, "strata: error: env run: node %s: private tmpfs: %s\n", st_node_dir(n),
            strerror(errno));
    _exit(1);
  }
  char opts[256];
  snprintf(opts, sizeof opts, "lowerdir=checkouts/%s,upperdir=run/upper,workdir=run/work", hex);
  if (mount("overlay", "run/root", "overlay", 0, opts) < 0) {
    fprintf(stderr, "strata: error: env run: overlay on checkout %s: %s\n", hex, strerror(errno));
    _exit(1);
  }
}

/* Shared lock on the checkout: gc removes only images it can lock
 * exclusively. Checks that the checkout still exists once locked. */
static int lock_checkout(st_node *n, const st_digest *d, int *fd_out, st_error *err) {
  char hex[ST_DIGEST_HEX_LEN + 1], path[4096];
  snprintf(path, sizeof path, "%s/checkouts/%s.lock", st_node_dir(n), st_digest_hex(d, hex));
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return st_error_errno(err, errno, "env run: %s", path);
  while (flock(fd, LOCK_SH) < 0)
    if (errno != EINTR) {
      close(fd);
      return st_error_errno(err, errno, "env run: %s", path);
    }
  if (!st_node_has_checkout(n, d)) {
    close(fd);
    return st_error_set(err, ST_ENOENT, "image sha256:%s was removed from node %s", hex,
                        st_node_dir(n));
  }
  *fd_out = fd;
  return ST_OK;
}

int st_env_run(st_node *n, const char *ref, const st_env_opts *opts, int *status_out,
               st_error *err) {
  st_digest d;
  int rc = st_node_resolve(n, ref, &d, err);
  if (rc < 0)
    return rc;
  _cleanup_(st_image_freep) st_image *img = NULL;
  if ((rc = st_image_load(&img, st_node_cache(n), &d, err)) < 0)
    return rc;
  const char *bwrap = find_bwrap();
  if (!bwrap)
    return st_error_set(err, ST_EUNSUPPORTED, "env run: bubblewrap (bwrap) is not installed");
  char hex[ST_DIGEST_HEX_LEN + 1], root[4096];
  st_digest_hex(&d, hex);
  snprintf(root, sizeof root, "%s/run/root", st_node_dir(n));
  strv a = {0};
  if (build_argv(&a, bwrap, root, img, opts) < 0) {
    strv_free(&a);
    return st_error_set(err, ST_EINVAL, "env run: bad --env (want KEY=VALUE)");
  }
  _cleanup_close_ int lock = -1;
  if ((rc = lock_checkout(n, &d, &lock, err)) < 0) {
    strv_free(&a);
    return rc;
  }
  st_node_touch(n, &d, false);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    strv_free(&a);
    return st_error_errno(err, errno, "env run: fork");
  }
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    setup_overlay(n, hex);
    execv(bwrap, a.v);
    fprintf(stderr, "strata: error: env run: %s: %s\n", bwrap, strerror(errno));
    _exit(127);
  }
  strv_free(&a);
  /* The terminal's ^C reaches the command; this process just waits. */
  signal(SIGINT, SIG_IGN);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return st_error_errno(err, errno, "env run: wait");
  signal(SIGINT, SIG_DFL);
  *status_out = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ST_OK;
}
