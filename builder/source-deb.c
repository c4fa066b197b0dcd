/* SPDX-License-Identifier: Apache-2.0 */
/* Debian package sources: the .deb (an ar archive) is read with libarchive;
 * its data.tar.* member is opened as a nested archive streamed from the outer
 * one and fed like an archive source, and control.tar.* yields the control
 * paragraph. Nothing is extracted to disk. */
#include <archive.h>
#include <archive_entry.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "log.h"
#include "source-private.h"

#define CONTROL_MAX (1u << 20)
#define DEBIAN_BINARY_MAX 64
#define NESTED_BUF (64u << 10)

/* The outer archive's current member as the input of an inner one. */
struct nested {
  struct archive *outer;
  uint8_t buf[NESTED_BUF];
};

static la_ssize_t nested_read(struct archive *a, void *ud, const void **buf) {
  struct nested *n = ud;
  la_ssize_t r = archive_read_data(n->outer, n->buf, sizeof n->buf);
  if (r < 0) {
    const char *msg = archive_error_string(n->outer);
    archive_set_error(a, archive_errno(n->outer), "%s", msg ? msg : "read error");
    return -1;
  }
  *buf = n->buf;
  return r;
}

struct deb {
  st_layer_writer *w;
  st_src_file file;
  const char *path;
  struct archive *outer;
  const st_source_opts *o;
  const char *dest;
  char *control;   /* owned */
  bool data_seen;
};

static void archive_freep(struct archive **a) {
  if (*a)
    archive_read_free(*a);
}

/* Opens the current member of the outer archive as a tar archive (any of
 * the supported compressions). */
static int open_member(struct deb *d, struct nested *n, const char *what, struct archive **out,
                       st_error *err) {
  struct archive *a = st_src_archive_new(false);
  if (!a)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  n->outer = d->outer;
  archive_read_set_read_callback(a, nested_read);
  archive_read_set_callback_data(a, n);
  if (archive_read_open1(a) != ARCHIVE_OK) {
    int rc = st_src_archive_error(a, &d->file, what, err);
    archive_read_free(a);
    return rc;
  }
  *out = a;
  return ST_OK;
}

/* Reads the current entry of a (at most max bytes) into a malloc'd buffer
 * with room for two more bytes (a newline and the NUL it is terminated
 * with). */
static int read_all(struct archive *a, size_t max, const char *what, const st_src_file *f,
                    char **out, size_t *len_out, st_error *err) {
  size_t cap = 4096, len = 0;
  _cleanup_free_ char *buf = malloc(cap + 2);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  for (;;) {
    if (len == cap) {
      if (cap >= max)
        return st_error_set(err, ST_ELIMIT, "%s: larger than %zu bytes", what, max);
      cap = cap * 2 < max ? cap * 2 : max;
      char *nb = realloc(buf, cap + 2);
      if (!nb)
        return st_error_set(err, ST_ENOMEM, "out of memory");
      buf = nb;
    }
    la_ssize_t r = archive_read_data(a, buf + len, cap - len);
    if (r < 0)
      return st_src_archive_error(a, f, what, err);
    if (r == 0)
      break;
    len += (size_t)r;
  }
  buf[len] = '\0';
  *out = ST_TAKE_PTR(buf);
  *len_out = len;
  return ST_OK;
}

static int check_debian_binary(struct deb *d, st_error *err) {
  char what[PATH_MAX + 32];
  snprintf(what, sizeof what, "deb %s: debian-binary", d->path);
  _cleanup_free_ char *text = NULL;
  size_t len;
  int rc = read_all(d->outer, DEBIAN_BINARY_MAX, what, &d->file, &text, &len, err);
  if (rc == ST_ELIMIT)
    return st_error_set(err, ST_EFORMAT, "%s: unsupported format (over %d bytes)", what,
                        DEBIAN_BINARY_MAX);
  if (rc < 0)
    return rc;
  size_t i = 2;
  bool ok = len >= 3 && !strncmp(text, "2.", 2);
  while (ok && i < len && text[i] >= '0' && text[i] <= '9')
    i++;
  if (!ok || i == 2 || (i < len && strcmp(text + i, "\n") != 0))
    return st_error_set(err, ST_EFORMAT, "%s: unsupported format version '%.*s'", what,
                        (int)strcspn(text, "\n"), text);
  return ST_OK;
}

/* Ends the control text with exactly one newline; rejects NUL bytes and an
 * empty paragraph. */
static int normalise_control(char *text, size_t len, const char *what, st_error *err) {
  if (memchr(text, '\0', len))
    return st_error_set(err, ST_EFORMAT, "%s: control file contains a NUL byte", what);
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
    len--;
  if (len == 0)
    return st_error_set(err, ST_EFORMAT, "%s: control file is empty", what);
  text[len] = '\n'; /* read_all left room for it */
  text[len + 1] = '\0';
  return ST_OK;
}

static int read_control(struct deb *d, struct archive *a, const char *what, st_error *err) {
  for (;;) {
    struct archive_entry *ae = NULL;
    int r = archive_read_next_header(a, &ae);
    if (r == ARCHIVE_EOF)
      return st_error_set(err, ST_EFORMAT, "%s: no control file", what);
    if (r < ARCHIVE_WARN)
      return st_src_archive_error(a, &d->file, what, err);
    const char *name = archive_entry_pathname(ae);
    while (name && name[0] == '.' && name[1] == '/')
      name += 2;
    if (!name || strcmp(name, "control") != 0 || archive_entry_filetype(ae) != AE_IFREG)
      continue;
    char *text = NULL;
    size_t len;
    int rc = read_all(a, CONTROL_MAX, what, &d->file, &text, &len, err);
    if (rc == ST_OK && (rc = normalise_control(text, len, what, err)) == ST_OK)
      d->control = text;
    else
      free(text);
    return rc;
  }
}

/* Handles the control.tar.* or data.tar.* member name (or ignores it). */
static int member(struct deb *d, const char *name, st_error *err) {
  bool is_control = !strncmp(name, "control.tar", 11) && (!name[11] || name[11] == '.');
  bool is_data = !strncmp(name, "data.tar", 8) && (!name[8] || name[8] == '.');
  if (!is_control && !is_data) {
    if (name[0] == '_')
      return ST_OK; /* reserved for local additions */
    return st_error_set(err, ST_EFORMAT, "deb %s: unexpected member '%s'", d->path, name);
  }
  if ((is_control && d->control) || (is_data && d->data_seen))
    return st_error_set(err, ST_EFORMAT, "deb %s: member '%s' appears twice", d->path, name);
  char what[PATH_MAX + 64];
  snprintf(what, sizeof what, "deb %s: %s", d->path, name);
  _cleanup_free_ struct nested *n = malloc(sizeof *n);
  if (!n)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  _cleanup_(archive_freep) struct archive *a = NULL;
  int rc = open_member(d, n, what, &a, err);
  if (rc < 0)
    return rc;
  if (is_control)
    return read_control(d, a, what, err);
  d->data_seen = true;
  st_feed fd = {.w = d->w, .what = what, .dest = d->dest, .strip = d->o->strip,
                .mtime = d->o->mtime, .file = &d->file};
  return st_src_feed_archive(a, &fd, err);
}

static int read_members(struct deb *d, st_error *err) {
  for (unsigned i = 0;; i++) {
    struct archive_entry *ae = NULL;
    int r = archive_read_next_header(d->outer, &ae);
    if (r == ARCHIVE_EOF)
      break;
    char what[PATH_MAX + 16];
    snprintf(what, sizeof what, "deb %s", d->path);
    if (r < ARCHIVE_WARN)
      return st_src_archive_error(d->outer, &d->file, what, err);
    const char *name = archive_entry_pathname(ae);
    if (!name)
      return st_error_set(err, ST_EFORMAT, "%s: a member has no name", what);
    bool binary = !strcmp(name, "debian-binary");
    if ((i == 0) != binary)
      return st_error_set(err, ST_EFORMAT, "%s: member %u is '%s'; debian-binary must come "
                          "first, once", what, i + 1, name);
    int rc = binary ? check_debian_binary(d, err) : member(d, name, err);
    if (rc < 0)
      return rc;
  }
  if (!d->data_seen)
    return st_error_set(err, ST_EFORMAT, "deb %s: no data.tar member", d->path);
  if (!d->control)
    return st_error_set(err, ST_EFORMAT, "deb %s: no control.tar member", d->path);
  return ST_OK;
}

int st_source_deb(st_layer_writer *w, const char *path, const st_source_opts *o,
                  char **control_out, st_error *err) {
  _cleanup_free_ char *dest = NULL;
  int rc = st_src_dest(o->dest, &dest, err);
  if (rc < 0)
    return st_error_prefix(err, "deb %s", path);
  struct deb d = {.w = w, .path = path, .o = o, .dest = dest};
  if ((rc = st_src_file_open(&d.file, path, o->hasher, err)) < 0)
    return rc;
  d.outer = archive_read_new();
  if (!d.outer) {
    rc = st_error_set(err, ST_ENOMEM, "out of memory");
  } else {
    archive_read_support_format_ar(d.outer);
    if (st_src_file_attach(d.outer, &d.file, false) != ARCHIVE_OK) {
      char what[PATH_MAX + 16];
      snprintf(what, sizeof what, "deb %s", path);
      rc = st_src_archive_error(d.outer, &d.file, what, err);
    } else {
      rc = read_members(&d, err);
    }
  }
  if (rc == ST_OK)
    rc = st_src_file_hash_rest(&d.file, err);
  if (rc == ST_OK && control_out)
    *control_out = ST_TAKE_PTR(d.control);
  free(d.control);
  archive_freep(&d.outer);
  st_src_file_close(&d.file);
  return rc;
}
