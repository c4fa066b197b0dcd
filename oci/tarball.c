/* SPDX-License-Identifier: Apache-2.0 */
/* Image tarballs (docker save, docker-archive, an OCI layout packed with
 * tar) read in place: one pass over the headers indexes the members; a
 * member is then read by starting a tar reader at its header (uncompressed
 * tarballs) or by walking the headers again (compressed ones). Nothing is
 * extracted to disk. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import-private.h"

#define READ_BUF (64u << 10)
/* Most members of one tarball, and links followed to reach a member. */
#define MEMBERS_MAX 65536
#define LINKS_MAX 8

typedef struct {
  char *name;  /* normalised */
  char *link;  /* nullable: the member this one is a symlink or hardlink to */
  uint64_t size;
  int64_t header_pos; /* start of its headers in the uncompressed stream */
  size_t ordinal;     /* headers before it */
} member;

struct st_oci_tar {
  char *path;
  int fd;
  int64_t size;
  bool compressed;
  member *m; /* sorted by name */
  size_t n;
};

/* ---- the file under a reader: pread from pos, forward skips are free ---- */

typedef struct {
  const st_oci_tar *t;
  int64_t pos;
  uint8_t *buf;
} tfile;

static la_ssize_t tfile_read(struct archive *a, void *ud, const void **buf) {
  tfile *f = ud;
  ssize_t n;
  do
    n = pread(f->t->fd, f->buf, READ_BUF, f->pos);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    archive_set_error(a, errno, "read %s: %s", f->t->path, strerror(errno));
    return -1;
  }
  f->pos += n;
  *buf = f->buf;
  return n;
}

static la_int64_t tfile_skip(struct archive *a, void *ud, la_int64_t req) {
  (void)a;
  tfile *f = ud;
  int64_t left = f->t->size > f->pos ? f->t->size - f->pos : 0;
  int64_t n = req < left ? req : left;
  f->pos += n;
  return n;
}

static struct archive *reader_new(bool filters) {
  struct archive *a = archive_read_new();
  if (a && filters)
    st_oci_archive_filters(a);
  if (a)
    archive_read_support_format_tar(a);
  return a;
}

/* Opens a over t's file from offset pos. */
static int reader_open(struct archive *a, tfile *f, const st_oci_tar *t, int64_t pos) {
  *f = (tfile){.t = t, .pos = pos, .buf = malloc(READ_BUF)};
  if (!f->buf)
    return ARCHIVE_FATAL;
  archive_read_set_read_callback(a, tfile_read);
  archive_read_set_skip_callback(a, tfile_skip);
  archive_read_set_callback_data(a, f);
  return archive_read_open1(a);
}

/* ---- names ---- */

/* Normalises a member name relative to dir ("" = the top): '.' and empty
 * components dropped, '..' goes up. NULL (with *why set) for an absolute
 * name, one leaving the tarball or an empty one. */
static char *norm_name(const char *dir, const char *name, const char **why) {
  if (name[0] == '/') {
    *why = "absolute name refused";
    return NULL;
  }
  size_t dl = strlen(dir), nl = strlen(name);
  char *p = malloc(dl + nl + 2);
  if (!p) {
    *why = "out of memory";
    return NULL;
  }
  memcpy(p, dir, dl);
  size_t n = dl;
  for (const char *s = name; *s;) {
    const char *e = strchrnul(s, '/');
    size_t cl = (size_t)(e - s);
    if (cl == 2 && s[0] == '.' && s[1] == '.') {
      char *up = n ? memrchr(p, '/', n) : NULL;
      if (!n) {
        free(p);
        *why = "'..' leaves the tarball";
        return NULL;
      }
      n = up ? (size_t)(up - p) : 0;
    } else if (cl > 0 && !(cl == 1 && s[0] == '.')) {
      if (n)
        p[n++] = '/';
      memcpy(p + n, s, cl);
      n += cl;
    }
    s = *e ? e + 1 : e;
  }
  p[n] = '\0';
  if (!n) {
    free(p);
    *why = "empty name";
    return NULL;
  }
  return p;
}

static const char *ae_name(struct archive_entry *ae) {
  const char *p = archive_entry_pathname(ae);
  return p ? p : archive_entry_pathname_utf8(ae);
}

static int member_cmp(const void *a, const void *b) {
  return strcmp(((const member *)a)->name, ((const member *)b)->name);
}

/* ---- indexing ---- */

void st_oci_tar_free(st_oci_tar *t) {
  if (!t)
    return;
  for (size_t i = 0; i < t->n; i++) {
    free(t->m[i].name);
    free(t->m[i].link);
  }
  free(t->m);
  if (t->fd >= 0)
    close(t->fd);
  free(t->path);
  free(t);
}

const char *st_oci_tar_path(const st_oci_tar *t) { return t->path; }

/* Adds the member of header ae (ordinal k) to t, or nothing for
 * directories and other types. */
static int add_member(st_oci_tar *t, struct archive *a, struct archive_entry *ae, size_t k,
                      size_t *cap, st_error *err) {
  const char *raw = ae_name(ae), *why = NULL;
  if (!raw)
    return st_error_set(err, ST_EFORMAT, "tarball %s: member without a name", t->path);
  mode_t type = archive_entry_filetype(ae);
  const char *hl = archive_entry_hardlink(ae);
  if (!hl && type != AE_IFREG && type != AE_IFLNK)
    return ST_OK;
  if (t->n >= MEMBERS_MAX)
    return st_error_set(err, ST_ELIMIT, "tarball %s: more than %d members", t->path,
                        MEMBERS_MAX);
  if (t->n == *cap) {
    size_t nc = *cap ? *cap * 2 : 64;
    member *m = realloc(t->m, nc * sizeof *m);
    if (!m)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    t->m = m;
    *cap = nc;
  }
  member *m = &t->m[t->n];
  *m = (member){.header_pos = archive_read_header_position(a), .ordinal = k};
  if (!(m->name = norm_name("", raw, &why)))
    return st_error_set(err, ST_EUNSAFE, "tarball %s: member '%.200s': %s", t->path, raw, why);
  t->n++;
  if (hl) { /* hardlink names are relative to the top */
    if (!(m->link = norm_name("", hl, &why)))
      return st_error_set(err, ST_EUNSAFE, "tarball %s: member '%.200s': hardlink target "
                          "'%.200s': %s", t->path, raw, hl, why);
  } else if (type == AE_IFLNK) { /* symlinks: relative to the member's directory */
    const char *target = archive_entry_symlink(ae);
    char *slash = strrchr(m->name, '/');
    char dir[PATH_MAX];
    size_t dl = slash ? (size_t)(slash - m->name) : 0;
    if (!target || dl >= sizeof dir)
      return st_error_set(err, ST_EFORMAT, "tarball %s: member '%.200s': bad symlink", t->path,
                          raw);
    memcpy(dir, m->name, dl);
    dir[dl] = '\0';
    if (!(m->link = norm_name(dir, target, &why)))
      return st_error_set(err, ST_EUNSAFE, "tarball %s: member '%.200s': symlink target "
                          "'%.200s': %s", t->path, raw, target, why);
  } else {
    la_int64_t sz = archive_entry_size(ae);
    m->size = sz > 0 ? (uint64_t)sz : 0;
  }
  return ST_OK;
}

static int index_members(st_oci_tar *t, st_error *err) {
  struct archive *a = reader_new(true);
  tfile f = {0};
  if (!a)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  int rc = ST_OK, r = reader_open(a, &f, t, 0);
  size_t cap = 0, k = 0;
  struct archive_entry *ae;
  char last[256] = ""; /* the member read before a damaged one */
  while (r == ARCHIVE_OK && rc == ST_OK) {
    r = archive_read_next_header(a, &ae);
    if (r == ARCHIVE_EOF || r < ARCHIVE_WARN)
      break;
    rc = add_member(t, a, ae, k++, &cap, err);
    snprintf(last, sizeof last, "%s", ae_name(ae) ? ae_name(ae) : "");
    r = ARCHIVE_OK;
  }
  if (rc == ST_OK && r != ARCHIVE_EOF) {
    const char *msg = archive_error_string(a);
    rc = st_error_set(err, ST_EFORMAT, "tarball %s: %s%s%s%s", t->path,
                      k ? "after member '" : "", last, k ? "': " : "",
                      !f.buf ? "out of memory" : msg ? msg : "not a tar archive");
  }
  if (rc == ST_OK && k == 0)
    rc = st_error_set(err, ST_EFORMAT, "tarball %s: no members", t->path);
  t->compressed = archive_filter_count(a) > 1;
  archive_read_free(a);
  free(f.buf);
  if (rc < 0)
    return rc;
  if (t->n > 1)
    qsort(t->m, t->n, sizeof *t->m, member_cmp);
  for (size_t i = 1; i < t->n; i++)
    if (!strcmp(t->m[i - 1].name, t->m[i].name))
      return st_error_set(err, ST_EFORMAT, "tarball %s: member '%s' appears twice", t->path,
                          t->m[i].name);
  return ST_OK;
}

int st_oci_tar_open(st_oci_tar **out, const char *path, st_error *err) {
  _cleanup_(st_oci_tar_freep) st_oci_tar *t = calloc(1, sizeof *t);
  if (!t || !(t->path = strdup(path))) {
    if (t)
      t->fd = -1;
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  t->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (t->fd < 0)
    return st_error_errno(err, errno, "tarball %s", path);
  struct stat st;
  if (fstat(t->fd, &st) < 0)
    return st_error_errno(err, errno, "tarball %s", path);
  if (!S_ISREG(st.st_mode))
    return st_error_set(err, ST_EINVAL, "tarball %s: not a regular file", path);
  t->size = st.st_size;
  int rc = index_members(t, err);
  if (rc < 0)
    return rc;
  *out = ST_TAKE_PTR(t);
  return ST_OK;
}

/* The regular member name leads to (links followed), or NULL. */
static const member *find(const st_oci_tar *t, const char *name) {
  for (int depth = 0; depth <= LINKS_MAX; depth++) {
    member key = {.name = (char *)name};
    const member *m = bsearch(&key, t->m, t->n, sizeof *t->m, member_cmp);
    if (!m || !m->link)
      return m;
    name = m->link;
  }
  return NULL;
}

bool st_oci_tar_has(const st_oci_tar *t, const char *name, uint64_t *size) {
  const member *m = find(t, name);
  if (m && size)
    *size = m->size;
  return m != NULL;
}

/* ---- reading a member ---- */

struct st_oci_tar_stream {
  struct archive *a;
  tfile f;
  uint64_t pos;
};

void st_oci_tar_stream_free(st_oci_tar_stream *s) {
  if (!s)
    return;
  if (s->a)
    archive_read_free(s->a);
  free(s->f.buf);
  free(s);
}

int st_oci_tar_stream_open(st_oci_tar_stream **out, const st_oci_tar *t, const char *name,
                           uint64_t *size, st_error *err) {
  const member *m = find(t, name);
  if (!m)
    return st_error_set(err, ST_ENOENT, "tarball %s: no member '%s'", t->path, name);
  _cleanup_(st_oci_tar_stream_freep) st_oci_tar_stream *s = calloc(1, sizeof *s);
  if (!s || !(s->a = reader_new(t->compressed)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  /* An uncompressed tarball is read from the member's own header on. */
  size_t skip = t->compressed ? m->ordinal : 0;
  int r = reader_open(s->a, &s->f, t, t->compressed ? 0 : m->header_pos);
  struct archive_entry *ae = NULL;
  for (size_t k = 0; r == ARCHIVE_OK && k <= skip; k++)
    r = archive_read_next_header(s->a, &ae);
  if (r < ARCHIVE_WARN || r == ARCHIVE_EOF) {
    const char *msg = archive_error_string(s->a);
    return st_error_set(err, ST_EFORMAT, "tarball %s: member '%s': %s", t->path, name,
                        msg ? msg : "damaged tarball");
  }
  const char *why = NULL;
  _cleanup_free_ char *got = ae_name(ae) ? norm_name("", ae_name(ae), &why) : NULL;
  if (!got || strcmp(got, m->name) || archive_entry_filetype(ae) != AE_IFREG ||
      (uint64_t)archive_entry_size(ae) != m->size)
    return st_error_set(err, ST_EFORMAT, "tarball %s: member '%s' changed while read", t->path,
                        name);
  *size = m->size;
  *out = ST_TAKE_PTR(s);
  return ST_OK;
}

int st_oci_tar_stream_next(st_oci_tar_stream *s, const void **buf, size_t *len,
                           st_error *err) {
  la_int64_t off = 0;
  int r = archive_read_data_block(s->a, buf, len, &off);
  if (r == ARCHIVE_EOF) {
    *len = 0;
    return ST_OK;
  }
  if (r < ARCHIVE_WARN || off < 0 || (uint64_t)off != s->pos) {
    const char *msg = r < ARCHIVE_WARN ? archive_error_string(s->a) : "sparse member";
    return st_error_set(err, ST_EFORMAT, "%s", msg ? msg : "damaged tarball");
  }
  s->pos += *len;
  return ST_OK;
}

int st_oci_tar_read(const st_oci_tar *t, const char *name, size_t max, uint8_t **out,
                    size_t *len, st_error *err) {
  _cleanup_(st_oci_tar_stream_freep) st_oci_tar_stream *s = NULL;
  uint64_t size;
  int rc = st_oci_tar_stream_open(&s, t, name, &size, err);
  if (rc < 0)
    return rc;
  if (size > max)
    return st_error_set(err, ST_ELIMIT, "tarball %s: member '%s' is over %zu bytes", t->path,
                        name, max);
  _cleanup_free_ uint8_t *data = malloc(size + 1);
  if (!data)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  size_t n = 0;
  for (;;) {
    const void *b;
    size_t k;
    if ((rc = st_oci_tar_stream_next(s, &b, &k, err)) < 0)
      return st_error_prefix(err, "tarball %s: member '%s'", t->path, name);
    if (!k)
      break;
    if (k > size - n)
      return st_error_set(err, ST_EFORMAT, "tarball %s: member '%s' is longer than its header "
                          "says", t->path, name);
    memcpy(data + n, b, k);
    n += k;
  }
  if (n != size)
    return st_error_set(err, ST_EFORMAT, "tarball %s: member '%s' is truncated", t->path, name);
  data[n] = '\0';
  *out = ST_TAKE_PTR(data);
  *len = n;
  return ST_OK;
}
