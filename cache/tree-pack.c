/* SPDX-License-Identifier: Apache-2.0 */
/* Packing a directory tree: walk it without following symlinks, sort the
 * paths, and feed every entry to a layer writer. Files with several links
 * become one regular entry (the first path in sorted order) plus hardlinks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cleanup.h"
#include "dset.h"
#include "layer-writer.h"
#include "log.h"

struct node {
  char *path; /* relative; "" for the root */
  struct stat st;
};

struct walk {
  struct node *nodes;
  size_t n, cap;
  uint64_t total_bytes;
};

static int add_node(struct walk *wk, char *path, const struct stat *st, st_error *err) {
  if (wk->n == wk->cap) {
    size_t cap = wk->cap ? wk->cap * 2 : 1024;
    struct node *n = realloc(wk->nodes, cap * sizeof *n);
    if (!n) {
      free(path);
      return st_error_set(err, ST_ENOMEM, "out of memory");
    }
    wk->nodes = n;
    wk->cap = cap;
  }
  wk->nodes[wk->n++] = (struct node){path, *st};
  if (S_ISREG(st->st_mode))
    wk->total_bytes += (uint64_t)st->st_size;
  return ST_OK;
}

/* Collects every entry below dirfd (whose relative path is rel). */
static int walk_dir(struct walk *wk, int dirfd, const char *rel, const char *root,
                    st_error *err) {
  int fd = dup(dirfd);
  if (fd < 0)
    return st_error_errno(err, errno, "%s/%s", root, rel);
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return st_error_errno(err, errno, "%s/%s", root, rel);
  }
  int rc = ST_OK;
  struct dirent *de;
  errno = 0;
  while (rc == ST_OK && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    char *path = NULL;
    if (asprintf(&path, "%s%s%s", rel, *rel ? "/" : "", de->d_name) < 0) {
      rc = st_error_set(err, ST_ENOMEM, "out of memory");
      break;
    }
    struct stat st;
    if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      rc = st_error_errno(err, errno, "%s/%s", root, path);
      free(path);
      break;
    }
    if ((rc = add_node(wk, path, &st, err)) < 0)
      break;
    if (S_ISDIR(st.st_mode)) {
      _cleanup_close_ int sub =
          openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0)
        rc = st_error_errno(err, errno, "%s/%s", root, path);
      else
        rc = walk_dir(wk, sub, path, root, err);
    }
    errno = 0;
  }
  if (rc == ST_OK && errno)
    rc = st_error_errno(err, errno, "read directory %s/%s", root, rel);
  closedir(d);
  return rc;
}

static int node_cmp(const void *a, const void *b) {
  return strcmp(((const struct node *)a)->path, ((const struct node *)b)->path);
}

static int xattr_cmp(const void *a, const void *b) {
  return strcmp(((const st_xattr *)a)->name, ((const st_xattr *)b)->name);
}

/* overlayfs keeps its bookkeeping (opaque, origin, impure, ...) in
 * trusted.overlay.* or, mounted with userxattr, user.overlay.* */
static bool is_overlay_xattr(const char *name) {
  return !strncmp(name, "trusted.overlay.", 16) || !strncmp(name, "user.overlay.", 13);
}

/* An overlay upper directory marks a directory opaque with "y". */
static bool overlay_opaque(const char *full) {
  static const char *const names[] = {"trusted.overlay.opaque", "user.overlay.opaque"};
  for (size_t i = 0; i < ST_ARRAY_SIZE(names); i++) {
    char v[2];
    if (lgetxattr(full, names[i], v, sizeof v) == 1 && v[0] == 'y')
      return true;
  }
  return false;
}

/* Reads the xattrs of root/rel (not following symlinks) into e; with
 * overlay, not the overlay's own. */
static int read_xattrs(st_entry *e, const char *root, const char *rel, bool overlay,
                       st_error *err) {
  char full[PATH_MAX];
  snprintf(full, sizeof full, "%s/%s", root, rel);
  char names[64 * 1024];
  ssize_t n = llistxattr(full, names, sizeof names);
  if (n < 0) {
    if (errno == ENOTSUP || errno == ENODATA)
      return ST_OK;
    return st_error_errno(err, errno, "list xattrs of %s", full);
  }
  size_t count = 0;
  for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1)
    count++;
  if (!count)
    return ST_OK;
  e->xattrs = calloc(count, sizeof *e->xattrs);
  if (!e->xattrs)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1) {
    const char *name = names + off;
    if (overlay && is_overlay_xattr(name))
      continue;
    uint8_t value[ST_XATTR_MAX];
    ssize_t vl = lgetxattr(full, name, value, sizeof value);
    if (vl < 0) {
      if (errno == ENODATA || errno == ENOTSUP || errno == EPERM)
        continue; /* vanished, or not ours to read */
      return st_error_errno(err, errno, "read xattr %s of %s", name, full);
    }
    st_xattr *x = &e->xattrs[e->n_xattrs];
    x->name = strdup(name);
    x->value = malloc(vl ? (size_t)vl : 1);
    if (!x->name || !x->value) {
      free(x->name);
      free(x->value);
      return st_error_set(err, ST_ENOMEM, "out of memory");
    }
    memcpy(x->value, value, (size_t)vl);
    x->len = (size_t)vl;
    e->n_xattrs++;
  }
  qsort(e->xattrs, e->n_xattrs, sizeof *e->xattrs, xattr_cmp);
  return ST_OK;
}

/* The layer path of rel (relative to the packed dir): rel under opts->dest.
 * NULL on OOM. */
static char *layer_path(const st_pack_opts *opts, const char *rel) {
  const char *dest = opts->dest ? opts->dest : "";
  char *p = NULL;
  if (!*dest || !*rel)
    return strdup(*dest ? dest : rel);
  return asprintf(&p, "%s/%s", dest, rel) < 0 ? NULL : p;
}

/* The (inode, device) key of a multiply-linked file. */
static st_digest inode_key(const struct stat *st) {
  st_digest k = {{0}};
  uint64_t ino = st->st_ino, dev = st->st_dev;
  memcpy(k.bytes, &ino, sizeof ino);
  memcpy(k.bytes + 8, &dev, sizeof dev);
  return k;
}

static int add_node_entry(st_layer_writer *w, int rootfd, const char *root, struct walk *wk,
                          size_t i, st_dset *inodes, const st_pack_opts *opts, st_error *err) {
  const struct node *nd = &wk->nodes[i];
  const struct stat *st = &nd->st;
  const char *shown = *nd->path ? nd->path : ".";
  if (opts->overlay_upper && S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0)) {
    st_entry e = {.type = ST_ENTRY_WHITEOUT, .mtime = opts->mtime};
    if (!(e.path = layer_path(opts, nd->path)))
      return st_error_set(err, ST_ENOMEM, "out of memory");
    return st_layer_writer_add(w, &e, err);
  }
  if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode) && !S_ISLNK(st->st_mode)) {
    st_warn("skipping %s/%s: %s are not supported in layers", root, nd->path,
            S_ISFIFO(st->st_mode) ? "FIFOs" : S_ISSOCK(st->st_mode) ? "sockets" : "device nodes");
    st_layer_writer_skip(w);
    return ST_OK;
  }
  st_entry e = {
      .mode = st->st_mode & 07777,
      .uid = opts->owner_fixed ? opts->uid : opts->owner_root ? 0 : st->st_uid,
      .gid = opts->owner_fixed ? opts->gid : opts->owner_root ? 0 : st->st_gid,
      .mtime = opts->keep_mtime ? st->st_mtim.tv_sec : opts->mtime,
  };
  e.path = layer_path(opts, nd->path);
  if (!e.path)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = read_xattrs(&e, root, nd->path, opts->overlay_upper, err);
  if (rc < 0) {
    st_entry_clear(&e);
    return rc;
  }
  if (S_ISDIR(st->st_mode)) {
    e.type = ST_ENTRY_DIR;
    if (opts->overlay_upper && *nd->path) {
      char full[PATH_MAX];
      snprintf(full, sizeof full, "%s/%s", root, nd->path);
      e.opaque = overlay_opaque(full);
    }
    return st_layer_writer_add(w, &e, err);
  }
  if (S_ISLNK(st->st_mode)) {
    char target[PATH_MAX + 1];
    ssize_t n = readlinkat(rootfd, nd->path, target, PATH_MAX);
    if (n <= 0) {
      st_entry_clear(&e);
      return st_error_errno(err, n < 0 ? errno : EINVAL, "readlink %s/%s", root, shown);
    }
    target[n] = '\0';
    e.type = ST_ENTRY_SYMLINK;
    e.target = strdup(target);
    return st_layer_writer_add(w, &e, err);
  }
  if (st->st_nlink > 1) {
    st_digest key = inode_key(st);
    uint64_t first;
    if (st_dset_get(inodes, &key, &first)) {
      e.type = ST_ENTRY_HARDLINK;
      e.target = layer_path(opts, wk->nodes[first].path);
      if (!e.target) {
        st_entry_clear(&e);
        return st_error_set(err, ST_ENOMEM, "out of memory");
      }
      st_debug("%s: hardlink to %s", e.path, e.target);
      return st_layer_writer_add(w, &e, err);
    }
    if (st_dset_insert(inodes, &key, i) < 0) {
      st_entry_clear(&e);
      return st_error_set(err, ST_ENOMEM, "out of memory");
    }
  }
  e.type = ST_ENTRY_REGULAR;
  if ((uint64_t)st->st_size <= ST_WHOLE_FILE_MAX) {
    char shown_path[PATH_MAX];
    snprintf(shown_path, sizeof shown_path, "%s/%s", root, nd->path);
    return st_layer_writer_add_file_at(w, &e, rootfd, nd->path, (uint64_t)st->st_size,
                                       shown_path, err);
  }
  _cleanup_close_ int fd = openat(rootfd, nd->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    st_entry_clear(&e);
    return st_error_errno(err, errno, "open %s/%s", root, nd->path);
  }
  char what[PATH_MAX];
  snprintf(what, sizeof what, "%s/%s", root, nd->path);
  return st_layer_writer_add_fd(w, &e, fd, (uint64_t)st->st_size, what, err);
}

int st_layer_pack_dir(st_layer_writer *w, const char *dir, const st_pack_opts *opts,
                      st_error *err) {
  if (opts->dest && st_path_check(opts->dest, err) < 0)
    return st_error_prefix(err, "pack %s: destination", dir);
  _cleanup_close_ int rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return st_error_errno(err, errno, "%s", dir);
  struct walk wk = {0};
  struct stat st;
  int rc = ST_OK;
  if (fstat(rootfd, &st) < 0)
    return st_error_errno(err, errno, "%s", dir);
  char *root = strdup("");
  if (!root)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  rc = add_node(&wk, root, &st, err);
  if (rc == ST_OK)
    rc = walk_dir(&wk, rootfd, "", dir, err);
  if (rc == ST_OK)
    qsort(wk.nodes, wk.n, sizeof *wk.nodes, node_cmp);
  st_dset *inodes = st_dset_new();
  if (!inodes && rc == ST_OK)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  uint64_t done = 0;
  for (size_t i = 0; i < wk.n && rc == ST_OK; i++) {
    rc = add_node_entry(w, rootfd, dir, &wk, i, inodes, opts, err);
    if (S_ISREG(wk.nodes[i].st.st_mode))
      done += (uint64_t)wk.nodes[i].st.st_size;
    if (opts->progress)
      opts->progress(done, wk.total_bytes, opts->progress_ud);
  }
  /* whole-file tasks read through rootfd: let them finish before it closes */
  st_error werr = {0};
  int wrc = st_layer_writer_wait(w, &werr);
  if (rc == ST_OK && wrc < 0)
    rc = st_error_set(err, wrc, "%s", werr.msg);
  st_dset_free(inodes);
  for (size_t i = 0; i < wk.n; i++)
    free(wk.nodes[i].path);
  free(wk.nodes);
  return rc;
}
