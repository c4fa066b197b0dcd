/* SPDX-License-Identifier: Apache-2.0 */
/* Archive sources: libarchive reads the file through our callbacks (so every
 * input byte is hashed exactly once) and each entry is streamed straight into
 * the layer writer, with its name checked and mapped through strip and dest. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "oci.h"
#include "source-private.h"

#define READ_BUF (128u << 10)
#define XATTRS_MAX 256

/* ---- the hashing file reader ---- */

int st_src_file_open(st_src_file *f, const char *path, st_hasher *hasher, st_error *err) {
  *f = (st_src_file){.fd = -1, .path = path, .hasher = hasher, .buf_size = READ_BUF};
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0)
    return st_error_errno(err, errno, "open %s", path);
  struct stat st;
  if (fstat(f->fd, &st) < 0) {
    int rc = st_error_errno(err, errno, "stat %s", path);
    st_src_file_close(f);
    return rc;
  }
  if (!S_ISREG(st.st_mode)) {
    st_src_file_close(f);
    return st_error_set(err, ST_EINVAL, "%s: not a regular file", path);
  }
  f->size = st.st_size;
  f->buf = malloc(f->buf_size);
  if (!f->buf) {
    st_src_file_close(f);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  return ST_OK;
}

void st_src_file_close(st_src_file *f) {
  if (f->fd >= 0)
    close(f->fd);
  f->fd = -1;
  free(f->buf);
  f->buf = NULL;
}

/* Hashes the file from f->hashed up to upto (or its end). -1 with
 * f->read_errno set on a read error. */
static int catch_up(st_src_file *f, int64_t upto) {
  while (f->hasher && f->hashed < upto) {
    int64_t left = upto - f->hashed;
    size_t want = left < (int64_t)f->buf_size ? (size_t)left : f->buf_size;
    ssize_t n = pread(f->fd, f->buf, want, f->hashed);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      f->read_errno = errno;
      return -1;
    }
    if (n == 0)
      break;
    st_hasher_update(f->hasher, f->buf, (size_t)n);
    f->hashed += n;
  }
  return 0;
}

static la_ssize_t file_read(struct archive *a, void *ud, const void **buf) {
  st_src_file *f = ud;
  ssize_t n = -1;
  if (catch_up(f, f->pos) == 0) {
    do
      n = pread(f->fd, f->buf, f->buf_size, f->pos);
    while (n < 0 && errno == EINTR);
    if (n < 0)
      f->read_errno = errno;
  }
  if (n < 0) {
    archive_set_error(a, f->read_errno, "read %s: %s", f->path, strerror(f->read_errno));
    return -1;
  }
  if (f->hasher && f->hashed >= f->pos && f->hashed < f->pos + n) {
    size_t skip = (size_t)(f->hashed - f->pos);
    st_hasher_update(f->hasher, f->buf + skip, (size_t)n - skip);
    f->hashed = f->pos + n;
  }
  f->pos += n;
  *buf = f->buf;
  return n;
}

static la_int64_t file_seek(struct archive *a, void *ud, la_int64_t off, int whence) {
  st_src_file *f = ud;
  int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : f->size;
  if ((off > 0 && off > INT64_MAX - base) || base + off < 0) {
    archive_set_error(a, EINVAL, "seek %s: offset out of range", f->path);
    return ARCHIVE_FATAL;
  }
  f->pos = base + off;
  return f->pos;
}

int st_src_file_attach(struct archive *a, st_src_file *f, bool seekable) {
  archive_read_set_read_callback(a, file_read);
  if (seekable)
    archive_read_set_seek_callback(a, file_seek);
  archive_read_set_callback_data(a, f);
  return archive_read_open1(a);
}

int st_src_file_hash_rest(st_src_file *f, st_error *err) {
  if (catch_up(f, INT64_MAX) < 0)
    return st_error_errno(err, f->read_errno, "read %s", f->path);
  return ST_OK;
}

int st_src_archive_error(struct archive *a, const st_src_file *f, const char *what,
                         st_error *err) {
  if (f && f->read_errno)
    return st_error_errno(err, f->read_errno, "%s: read", what);
  const char *msg = archive_error_string(a);
  return st_error_set(err, ST_EFORMAT, "%s: %s", what, msg ? msg : "damaged archive");
}

struct archive *st_src_archive_new(bool all_formats) {
  struct archive *a = archive_read_new();
  if (!a)
    return NULL;
  /* Explicit lists, not *_all(): no mtree (its entries name host files) and
   * no filter that runs an external program by design. */
  st_oci_archive_filters(a);
  archive_read_support_format_tar(a);
  if (all_formats) {
    archive_read_support_format_cpio(a);
    archive_read_support_format_zip(a);
    archive_read_support_format_ar(a);
  }
  return a;
}

/* ---- entries ---- */

/* An entry error: "<what>: entry '<name>': <libarchive's message>". */
static int entry_error(struct archive *a, const st_feed *fd, const char *name, st_error *err) {
  if (fd->file && fd->file->read_errno)
    return st_error_errno(err, fd->file->read_errno, "%s: entry '%s': read", fd->what, name);
  const char *msg = archive_error_string(a);
  return st_error_set(err, ST_EFORMAT, "%s: entry '%s': %s", fd->what, name,
                      msg ? msg : "damaged data");
}

/* Maps an archive name to its layer path in *out (malloc'd): "." components
 * and empty ones (leading "./", "//", a trailing '/') are dropped, then
 * fd->strip components, then fd->dest is prefixed. Returns 1, or 0 when the
 * name has no component left after strip (the entry is skipped), or
 * ST_EUNSAFE (detail only; callers name the entry). */
static int map_name(const st_feed *fd, const char *name, char **out, st_error *err) {
  if (name[0] == '/')
    return st_error_set(err, ST_EUNSAFE, "absolute name refused");
  size_t dl = strlen(fd->dest);
  char *p = malloc(dl + strlen(name) + 2);
  if (!p)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  memcpy(p, fd->dest, dl);
  size_t n = dl;
  unsigned comps = 0;
  for (const char *s = name; *s;) {
    const char *e = strchrnul(s, '/');
    size_t cl = (size_t)(e - s);
    if (cl == 2 && s[0] == '.' && s[1] == '.') {
      free(p);
      return st_error_set(err, ST_EUNSAFE, "'..' component refused");
    }
    if (cl > 0 && !(cl == 1 && s[0] == '.') && comps++ >= fd->strip) {
      if (n > 0)
        p[n++] = '/';
      memcpy(p + n, s, cl);
      n += cl;
    }
    s = *e ? e + 1 : e;
  }
  p[n] = '\0';
  if (fd->strip > 0 && comps <= fd->strip) {
    free(p);
    return 0;
  }
  int rc = st_path_check(p, err);
  if (rc < 0) {
    free(p);
    return rc;
  }
  *out = p;
  return 1;
}

static int xattr_cmp(const void *a, const void *b) {
  return strcmp(((const st_xattr *)a)->name, ((const st_xattr *)b)->name);
}

static int read_xattrs(struct archive_entry *ae, st_entry *e, const char *where, st_error *err) {
  int count = archive_entry_xattr_reset(ae);
  if (count <= 0)
    return ST_OK;
  if (count > XATTRS_MAX)
    return st_error_set(err, ST_ELIMIT, "%s: more than %d xattrs", where, XATTRS_MAX);
  e->xattrs = calloc((size_t)count, sizeof *e->xattrs);
  if (!e->xattrs)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  const char *name;
  const void *value;
  size_t len;
  while (e->n_xattrs < (size_t)count &&
         archive_entry_xattr_next(ae, &name, &value, &len) == ARCHIVE_OK) {
    if (!name || !*name)
      return st_error_set(err, ST_EFORMAT, "%s: xattr with an empty name", where);
    if (len > ST_XATTR_MAX)
      return st_error_set(err, ST_ELIMIT, "%s: xattr %s is over %u bytes", where, name,
                          ST_XATTR_MAX);
    st_xattr *x = &e->xattrs[e->n_xattrs];
    x->name = strdup(name);
    x->value = malloc(len ? len : 1);
    if (!x->name || !x->value) {
      free(x->name);
      free(x->value);
      x->name = NULL;
      x->value = NULL;
      return st_error_set(err, ST_ENOMEM, "out of memory");
    }
    if (len)
      memcpy(x->value, value, len);
    x->len = len;
    e->n_xattrs++;
  }
  qsort(e->xattrs, e->n_xattrs, sizeof *e->xattrs, xattr_cmp);
  for (size_t i = 1; i < e->n_xattrs; i++)
    if (!strcmp(e->xattrs[i - 1].name, e->xattrs[i].name))
      return st_error_set(err, ST_EFORMAT, "%s: xattr %s given twice", where, e->xattrs[i].name);
  return ST_OK;
}

/* Mode, owner, mtime and (with_xattrs) xattrs of ae into e. */
static int entry_meta(struct archive_entry *ae, const st_feed *fd, const char *name, st_entry *e,
                      bool with_xattrs, st_error *err) {
  la_int64_t uid = archive_entry_uid(ae), gid = archive_entry_gid(ae);
  if (uid < 0 || uid > UINT32_MAX || gid < 0 || gid > UINT32_MAX)
    return st_error_set(err, ST_EFORMAT, "%s: entry '%s': owner %" PRId64 ":%" PRId64
                        " out of range", fd->what, name, (int64_t)uid, (int64_t)gid);
  e->mode = archive_entry_perm(ae) & 07777;
  e->uid = (uint32_t)uid;
  e->gid = (uint32_t)gid;
  e->mtime = fd->mtime;
  if (!with_xattrs)
    return ST_OK;
  char where[512];
  snprintf(where, sizeof where, "%s: entry '%s'", fd->what, name);
  return read_xattrs(ae, e, where, err);
}

static int write_zeros(st_layer_writer *w, int64_t n, st_error *err) {
  static const uint8_t zeros[64u << 10];
  while (n > 0) {
    size_t k = n < (int64_t)sizeof zeros ? (size_t)n : sizeof zeros;
    int rc = st_layer_writer_write(w, zeros, k, err);
    if (rc < 0)
      return rc;
    n -= (int64_t)k;
  }
  return ST_OK;
}

/* Streams the data of the current entry into the writer's open file. Holes
 * of sparse entries become zeros (up to the declared size). */
static int feed_data(struct archive *a, struct archive_entry *ae, const st_feed *fd,
                     const char *name, st_error *err) {
  int64_t pos = 0;
  int64_t size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : -1;
  for (;;) {
    const void *buf = NULL;
    size_t len = 0;
    la_int64_t off = pos;
    int r = archive_read_data_block(a, &buf, &len, &off);
    if (r == ARCHIVE_EOF)
      return off > pos && off <= size ? write_zeros(fd->w, off - pos, err) : ST_OK;
    if (r < ARCHIVE_WARN)
      return entry_error(a, fd, name, err);
    if (off < pos || (off > pos && size >= 0 && off > size))
      return st_error_set(err, ST_EFORMAT, "%s: entry '%s': data block at a bad offset",
                          fd->what, name);
    int rc = write_zeros(fd->w, off - pos, err);
    if (rc == ST_OK && len)
      rc = st_layer_writer_write(fd->w, buf, len, err);
    if (rc < 0)
      return rc;
    pos = off + (int64_t)len;
  }
}

/* A regular file at path (consumed) with the entry's data. */
static int add_regular(struct archive *a, struct archive_entry *ae, const st_feed *fd,
                       const char *name, char *path, st_error *err) {
  st_entry e = {.type = ST_ENTRY_REGULAR, .path = path};
  int rc = entry_meta(ae, fd, name, &e, true, err);
  if (rc < 0) {
    st_entry_clear(&e);
    return rc;
  }
  if ((rc = st_layer_writer_begin_file(fd->w, &e, err)) < 0)
    return rc;
  if ((rc = feed_data(a, ae, fd, name, err)) < 0)
    return rc; /* the caller drops the writer */
  return st_layer_writer_end_file(fd->w, err);
}

/* A hardlink at path (consumed) to the archive name link. If the entry
 * carries data (cpio keeps it with the last link), the target is re-added
 * with it; the writer keeps the last entry of a path. */
static int add_hardlink(struct archive *a, struct archive_entry *ae, const st_feed *fd,
                        const char *name, char *path, const char *link, st_error *err) {
  _cleanup_free_ char *owned = path;
  char *target = NULL;
  int rc = map_name(fd, link, &target, err);
  if (rc < 0)
    return st_error_prefix(err, "%s: entry '%s': hardlink target '%s'", fd->what, name, link);
  if (rc == 0)
    return st_error_set(err, ST_EFORMAT, "%s: entry '%s': hardlink target '%s' is stripped away",
                        fd->what, name, link);
  if (!strcmp(target, path)) {
    free(target);
    return st_error_set(err, ST_EFORMAT, "%s: entry '%s': hardlink to itself", fd->what, name);
  }
  if (archive_entry_size_is_set(ae) && archive_entry_size(ae) > 0) {
    char *tcopy = strdup(target);
    rc = tcopy ? add_regular(a, ae, fd, name, tcopy, err)
               : st_error_set(err, ST_ENOMEM, "out of memory");
    if (rc < 0) {
      free(target);
      return rc;
    }
  }
  st_entry e = {.type = ST_ENTRY_HARDLINK, .path = ST_TAKE_PTR(owned), .target = target};
  rc = entry_meta(ae, fd, name, &e, false, err);
  if (rc < 0) {
    st_entry_clear(&e);
    return rc;
  }
  return st_layer_writer_add(fd->w, &e, err);
}

static const char *entry_pathname(struct archive_entry *ae) {
  const char *p = archive_entry_pathname(ae);
  return p ? p : archive_entry_pathname_utf8(ae);
}

static const char *entry_hardlink(struct archive_entry *ae) {
  const char *p = archive_entry_hardlink(ae);
  return p ? p : archive_entry_hardlink_utf8(ae);
}

static const char *entry_symlink(struct archive_entry *ae) {
  const char *p = archive_entry_symlink(ae);
  return p ? p : archive_entry_symlink_utf8(ae);
}

static const char *special_kind(mode_t type) {
  return type == AE_IFIFO                        ? "FIFOs"
         : type == AE_IFSOCK                     ? "sockets"
         : type == AE_IFCHR || type == AE_IFBLK  ? "device nodes"
                                                 : "entries of this type";
}

/* An OCI whiteout or opaque marker at path (consumed if it is one). Returns
 * 1 when the entry was one (and is handled), 0 when it is an ordinary entry. */
static int oci_whiteout(struct archive_entry *ae, const st_feed *fd, const char *name, char *path,
                        st_error *err) {
  char *slash = strrchr(path, '/');
  char *base = slash ? slash + 1 : path;
  if (strncmp(base, ".wh.", 4))
    return 0;
  _cleanup_free_ char *owned = path;
  if (!strcmp(base, ".wh..wh..opq")) {
    if (slash)
      *slash = '\0';
    else
      path[0] = '\0';
    int rc = st_layer_writer_mark_opaque(fd->w, path, err);
    return rc < 0 ? st_error_prefix(err, "%s: entry '%s'", fd->what, name) : 1;
  }
  const char *victim = base + 4;
  if (!*victim || !strcmp(victim, ".") || !strcmp(victim, "..") || !strncmp(victim, ".wh.", 4))
    return st_error_set(err, ST_EFORMAT, "%s: entry '%s': bad whiteout name", fd->what, name);
  size_t dl = slash ? (size_t)(base - path) : 0;
  st_entry e = {.type = ST_ENTRY_WHITEOUT, .mtime = fd->mtime};
  if (!(e.path = malloc(strlen(path))))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  memcpy(e.path, path, dl);
  strcpy(e.path + dl, victim);
  (void)ae;
  int rc = st_layer_writer_add(fd->w, &e, err);
  return rc < 0 ? st_error_prefix(err, "%s: entry '%s'", fd->what, name) : 1;
}

static int feed_entry(struct archive *a, struct archive_entry *ae, const st_feed *fd,
                      st_error *err) {
  const char *name = entry_pathname(ae);
  if (!name || !*name)
    return st_error_set(err, ST_EFORMAT, "%s: an entry has no name", fd->what);
  char *path = NULL;
  int rc = map_name(fd, name, &path, err);
  if (rc < 0)
    return st_error_prefix(err, "%s: entry '%s'", fd->what, name);
  if (rc == 0)
    return ST_OK; /* stripped away */
  if (fd->oci_whiteouts) {
    rc = oci_whiteout(ae, fd, name, path, err);
    if (rc != 0)
      return rc < 0 ? rc : ST_OK;
  }
  const char *link = entry_hardlink(ae);
  if (link)
    return add_hardlink(a, ae, fd, name, path, link, err);
  mode_t type = archive_entry_filetype(ae);
  if (!*path && type != AE_IFDIR) {
    free(path);
    return st_error_set(err, ST_EFORMAT, "%s: entry '%s': the destination itself must be a "
                        "directory", fd->what, name);
  }
  if (type == AE_IFREG)
    return add_regular(a, ae, fd, name, path, err);
  st_entry e = {.path = path};
  if (type == AE_IFDIR) {
    e.type = ST_ENTRY_DIR;
    if (fd->dirs) {
      st_digest pd;
      st_sha256(&pd, path, strlen(path));
      if (st_dset_insert(fd->dirs, &pd, 0) < 0) {
        free(path);
        return st_error_set(err, ST_ENOMEM, "out of memory");
      }
    }
  } else if (type == AE_IFLNK) {
    const char *target = entry_symlink(ae);
    if (!target || !*target || strlen(target) > ST_PATH_MAX) {
      free(path);
      return st_error_set(err, ST_EFORMAT, "%s: entry '%s': symlink target missing or too long",
                          fd->what, name);
    }
    e.type = ST_ENTRY_SYMLINK;
    e.target = strdup(target);
  } else {
    free(path);
    st_warn("skipping %s: entry '%s': %s are not supported in layers", fd->what, name,
            special_kind(type));
    st_layer_writer_skip(fd->w);
    return ST_OK;
  }
  if (e.type == ST_ENTRY_SYMLINK && !e.target)
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  else
    rc = entry_meta(ae, fd, name, &e, true, err);
  if (rc < 0) {
    st_entry_clear(&e);
    return rc;
  }
  return st_layer_writer_add(fd->w, &e, err);
}

int st_src_feed_archive(struct archive *a, const st_feed *fd, st_error *err) {
  for (;;) {
    struct archive_entry *ae = NULL;
    int r = archive_read_next_header(a, &ae);
    if (r == ARCHIVE_EOF)
      return ST_OK;
    if (r < ARCHIVE_WARN)
      return st_src_archive_error(a, fd->file, fd->what, err);
    if (r == ARCHIVE_WARN)
      st_debug("%s: %s", fd->what, archive_error_string(a));
    int rc = feed_entry(a, ae, fd, err);
    if (rc < 0)
      return rc;
  }
}

int st_source_archive(st_layer_writer *w, const char *path, const st_source_opts *o,
                      st_error *err) {
  _cleanup_free_ char *dest = NULL;
  int rc = st_src_dest(o->dest, &dest, err);
  if (rc < 0)
    return st_error_prefix(err, "archive %s", path);
  st_src_file f;
  if ((rc = st_src_file_open(&f, path, o->hasher, err)) < 0)
    return rc;
  char what[PATH_MAX + 16];
  snprintf(what, sizeof what, "archive %s", path);
  struct archive *a = st_src_archive_new(true);
  if (!a) {
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  } else if (st_src_file_attach(a, &f, true) != ARCHIVE_OK) {
    rc = st_src_archive_error(a, &f, what, err);
  } else {
    st_feed fd = {.w = w, .what = what, .dest = dest, .strip = o->strip, .mtime = o->mtime,
                  .file = &f};
    rc = st_src_feed_archive(a, &fd, err);
  }
  if (rc == ST_OK)
    rc = st_src_file_hash_rest(&f, err);
  if (a)
    archive_read_free(a);
  st_src_file_close(&f);
  return rc;
}
