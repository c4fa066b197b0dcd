/* SPDX-License-Identifier: Apache-2.0 */
/* Layer writer: the caller's thread reads and cuts; pool workers hash,
 * deduplicate, compress and store each chunk. Every chunk job records its
 * digest in its own slot, so the index is assembled after the pool drains. */
#include "layer-writer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "dset.h"
#include "log.h"
#include "fs.h"
#include "pool.h"

#define READ_BUF (1u << 20)

struct chunk_job {
  st_layer_writer *w;
  uint8_t *data; /* owned until the job ran */
  uint32_t len;
  st_digest digest;
};

struct file_rec {
  size_t entry;             /* index into the layer index */
  struct chunk_job **jobs;  /* owned */
  size_t n_jobs, cap_jobs;
  bool whole;               /* read and cut by one pool task (small files) */
  uint64_t size;            /* whole: bytes read */
};

/* A small file read, cut, hashed and stored by one pool task, so that the
 * per-file system calls of many small files spread over every worker. */
struct whole_job {
  st_layer_writer *w;
  struct file_rec *rec;
  int dirfd;    /* borrowed; valid until the pool drains */
  char *path;   /* owned, relative to dirfd */
  char *shown;  /* owned, for messages */
  uint64_t size;
};

struct st_layer_writer {
  st_store *store;
  st_layer_index *idx;
  st_pool *pool;
  st_chunker chunker;
  /* current file */
  bool in_file;
  struct file_rec *cur;
  uint8_t *buf;
  size_t buf_len;
  uint8_t *readbuf;
  /* all files */
  struct file_rec **files; /* each owned; pointers stay valid for pool tasks */
  size_t n_files, cap_files;
  /* shared with workers */
  pthread_mutex_t lock;
  st_dset *seen;
  atomic_bool failed;
  st_error first_err;
  st_pack_stats stats;
  st_entry dir_defaults;
  const st_layer_index *lower;
  char **opaque; /* directories marked opaque (owned) */
  size_t n_opaque;
};

int st_layer_writer_new(st_layer_writer **out, st_store *s, unsigned threads, st_error *err) {
  st_layer_writer *w = calloc(1, sizeof *w);
  if (!w)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  const st_store_config *cfg = st_store_get_config(s);
  w->store = s;
  w->dir_defaults = (st_entry){.type = ST_ENTRY_DIR, .mode = 0755};
  w->idx = st_layer_index_new(&cfg->chunking);
  w->buf = malloc(cfg->chunking.max);
  w->readbuf = malloc(READ_BUF);
  w->seen = st_dset_new();
  pthread_mutex_init(&w->lock, NULL);
  st_chunker_init(&w->chunker, &cfg->chunking);
  if (!w->idx || !w->buf || !w->readbuf || !w->seen) {
    st_layer_writer_free(w);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  int rc = st_pool_new(&w->pool, threads, threads * 4, err);
  if (rc < 0) {
    st_layer_writer_free(w);
    return rc;
  }
  *out = w;
  return ST_OK;
}

static void free_files(st_layer_writer *w) {
  for (size_t i = 0; i < w->n_files; i++) {
    for (size_t j = 0; j < w->files[i]->n_jobs; j++) {
      free(w->files[i]->jobs[j]->data);
      free(w->files[i]->jobs[j]);
    }
    free(w->files[i]->jobs);
    free(w->files[i]);
  }
  free(w->files);
  w->files = NULL;
  w->n_files = w->cap_files = 0;
}

void st_layer_writer_free(st_layer_writer *w) {
  if (!w)
    return;
  st_pool_free(w->pool);
  free_files(w);
  st_layer_index_free(w->idx);
  st_dset_free(w->seen);
  free(w->buf);
  free(w->readbuf);
  for (size_t i = 0; i < w->n_opaque; i++)
    free(w->opaque[i]);
  free(w->opaque);
  pthread_mutex_destroy(&w->lock);
  free(w);
}

const st_pack_stats *st_layer_writer_stats(const st_layer_writer *w) { return &w->stats; }

void st_layer_writer_set_lower(st_layer_writer *w, const st_layer_index *lower) {
  w->lower = lower;
}

void st_layer_writer_set_dir_defaults(st_layer_writer *w, uint32_t mode, uint32_t uid,
                                      uint32_t gid, int64_t mtime) {
  w->dir_defaults.mode = mode & 07777;
  w->dir_defaults.uid = uid;
  w->dir_defaults.gid = gid;
  w->dir_defaults.mtime = mtime;
}
void st_layer_writer_skip(st_layer_writer *w) { w->stats.skipped++; }

static void fail(st_layer_writer *w, const st_error *e) {
  pthread_mutex_lock(&w->lock);
  if (!w->failed) {
    w->first_err = *e;
    w->failed = true;
  }
  pthread_mutex_unlock(&w->lock);
}

static int check_failed(st_layer_writer *w, st_error *err) {
  if (!w->failed)
    return ST_OK;
  pthread_mutex_lock(&w->lock);
  int rc = st_error_set(err, w->first_err.code, "%s", w->first_err.msg);
  pthread_mutex_unlock(&w->lock);
  return rc;
}

/* Hashes a chunk, and unless this writer or the store already has it,
 * compresses and stores it. Runs on pool workers. */
static int store_chunk(st_layer_writer *w, const uint8_t *data, uint32_t len, st_digest *d,
                       st_error *e) {
  st_sha256(d, data, len);
  pthread_mutex_lock(&w->lock);
  int fresh = st_dset_insert(w->seen, d, 0);
  pthread_mutex_unlock(&w->lock);
  if (fresh < 0)
    return st_error_set(e, ST_ENOMEM, "out of memory");
  uint64_t stored = 0;
  int rc = fresh ? st_store_put_hashed(w->store, ST_KIND_CHUNK, d, data, len, &stored, e) : 0;
  if (rc == ST_OK && stored) {
    pthread_mutex_lock(&w->lock);
    w->stats.chunks_new++;
    w->stats.bytes_new += len;
    w->stats.bytes_new_stored += stored;
    pthread_mutex_unlock(&w->lock);
  }
  return rc;
}

static void chunk_job_run(void *arg) {
  struct chunk_job *j = arg;
  st_layer_writer *w = j->w;
  st_error e = {0};
  if (!w->failed && store_chunk(w, j->data, j->len, &j->digest, &e) < 0)
    fail(w, &e);
  free(j->data);
  j->data = NULL;
}

static int rec_add_job(struct file_rec *f, struct chunk_job *j) {
  if (f->n_jobs == f->cap_jobs) {
    size_t cap = f->cap_jobs ? f->cap_jobs * 2 : 4;
    struct chunk_job **n = realloc(f->jobs, cap * sizeof *n);
    if (!n)
      return ST_ENOMEM;
    f->jobs = n;
    f->cap_jobs = cap;
  }
  f->jobs[f->n_jobs++] = j;
  return ST_OK;
}

static int cut_whole(st_layer_writer *w, struct whole_job *j, const uint8_t *buf, size_t n,
                     st_error *e) {
  st_chunker c;
  st_chunker_init(&c, st_layer_index_chunking(w->idx));
  size_t off = 0;
  while (off < n) {
    size_t k = st_chunker_scan(&c, buf + off, n - off);
    size_t len = k ? k : n - off;
    struct chunk_job *cj = calloc(1, sizeof *cj);
    if (!cj || rec_add_job(j->rec, cj) < 0) {
      free(cj);
      return st_error_set(e, ST_ENOMEM, "out of memory");
    }
    cj->len = (uint32_t)len;
    int rc = store_chunk(w, buf + off, cj->len, &cj->digest, e);
    if (rc < 0)
      return rc;
    off += len;
  }
  pthread_mutex_lock(&w->lock);
  w->stats.bytes += n;
  w->stats.chunks += j->rec->n_jobs;
  pthread_mutex_unlock(&w->lock);
  return ST_OK;
}

static void whole_job_run(void *arg) {
  struct whole_job *j = arg;
  st_layer_writer *w = j->w;
  st_error e = {0};
  int rc = ST_OK;
  uint8_t *buf = NULL;
  if (!w->failed) {
    int fd = openat(j->dirfd, j->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    buf = malloc(j->size ? j->size : 1);
    ssize_t n = -1;
    if (fd < 0)
      rc = st_error_errno(&e, errno, "open %s", j->shown);
    else if (!buf)
      rc = st_error_set(&e, ST_ENOMEM, "out of memory");
    else if ((n = st_pread_all(fd, buf, j->size, 0)) < 0)
      rc = st_error_errno(&e, (int)-n, "read %s", j->shown);
    if (fd >= 0)
      close(fd);
    if (rc == ST_OK) {
      j->rec->size = (uint64_t)n; /* a file that shrank meanwhile is taken as read */
      rc = cut_whole(w, j, buf, (size_t)n, &e);
    }
    if (rc < 0)
      fail(w, &e);
  }
  free(buf);
  free(j->path);
  free(j->shown);
  free(j);
}

static int submit_chunk(st_layer_writer *w, st_error *err) {
  struct chunk_job *j = calloc(1, sizeof *j);
  uint8_t *data = malloc(w->buf_len);
  if (!j || !data || rec_add_job(w->cur, j) < 0) {
    free(j);
    free(data);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  memcpy(data, w->buf, w->buf_len);
  *j = (struct chunk_job){.w = w, .data = data, .len = (uint32_t)w->buf_len};
  w->buf_len = 0;
  pthread_mutex_lock(&w->lock); /* whole-file tasks count too */
  w->stats.chunks++;
  pthread_mutex_unlock(&w->lock);
  st_pool_submit(w->pool, chunk_job_run, j);
  return ST_OK;
}

int st_layer_writer_add(st_layer_writer *w, st_entry *e, st_error *err) {
  switch (e->type) {
  case ST_ENTRY_DIR: w->stats.dirs++; break;
  case ST_ENTRY_SYMLINK: w->stats.symlinks++; break;
  case ST_ENTRY_HARDLINK: w->stats.hardlinks++; break;
  case ST_ENTRY_WHITEOUT: w->stats.whiteouts++; break;
  default:
    st_entry_clear(e);
    return st_error_set(err, ST_EINVAL, "use begin_file for regular files");
  }
  return st_layer_index_add(w->idx, e, err);
}

int st_layer_writer_add_stored(st_layer_writer *w, st_entry *e, st_error *err) {
  if (e->type != ST_ENTRY_REGULAR)
    return st_layer_writer_add(w, e, err);
  w->stats.files++;
  w->stats.bytes += e->size;
  w->stats.chunks += e->n_chunks;
  return st_layer_index_add(w->idx, e, err);
}

static int add_rec(st_layer_writer *w, struct file_rec *rec) {
  if (w->n_files == w->cap_files) {
    size_t cap = w->cap_files ? w->cap_files * 2 : 256;
    struct file_rec **n = realloc(w->files, cap * sizeof *n);
    if (!n)
      return ST_ENOMEM;
    w->files = n;
    w->cap_files = cap;
  }
  w->files[w->n_files++] = rec;
  return ST_OK;
}

int st_layer_writer_begin_file(st_layer_writer *w, st_entry *e, st_error *err) {
  if (w->in_file || e->type != ST_ENTRY_REGULAR) {
    st_entry_clear(e);
    return st_error_set(err, ST_EINVAL, "begin_file: not a regular file or a file is open");
  }
  struct file_rec *rec = calloc(1, sizeof *rec);
  if (!rec || add_rec(w, rec) < 0) {
    free(rec);
    st_entry_clear(e);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  e->size = 0;
  free(e->chunks);
  e->chunks = NULL;
  e->n_chunks = 0;
  size_t entry = st_layer_index_count(w->idx);
  int rc = st_layer_index_add(w->idx, e, err);
  if (rc < 0)
    return rc;
  w->cur = rec;
  rec->entry = entry;
  w->in_file = true;
  w->buf_len = 0;
  st_chunker_reset(&w->chunker);
  w->stats.files++;
  return ST_OK;
}

int st_layer_writer_write(st_layer_writer *w, const void *data, size_t len, st_error *err) {
  const uint8_t *p = data;
  int rc = check_failed(w, err);
  if (rc < 0)
    return rc;
  st_layer_index_entry_mut(w->idx, w->cur->entry)->size += len;
  pthread_mutex_lock(&w->lock);
  w->stats.bytes += len;
  pthread_mutex_unlock(&w->lock);
  while (len > 0) {
    size_t k = st_chunker_scan(&w->chunker, p, len);
    size_t take = k ? k : len;
    memcpy(w->buf + w->buf_len, p, take);
    w->buf_len += take;
    p += take;
    len -= take;
    if (k && (rc = submit_chunk(w, err)) < 0)
      return rc;
  }
  return ST_OK;
}

int st_layer_writer_end_file(st_layer_writer *w, st_error *err) {
  w->in_file = false;
  if (w->buf_len > 0)
    return submit_chunk(w, err);
  return check_failed(w, err);
}

int st_layer_writer_add_fd(st_layer_writer *w, st_entry *e, int fd, uint64_t size,
                           const char *path, st_error *err) {
  int rc = st_layer_writer_begin_file(w, e, err);
  if (rc < 0)
    return rc;
  for (uint64_t got = 0; got < size;) {
    size_t want = size - got < READ_BUF ? (size_t)(size - got) : READ_BUF;
    ssize_t n = read(fd, w->readbuf, want);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      w->in_file = false;
      return st_error_errno(err, errno, "read %s", path);
    }
    if (n == 0)
      break;
    got += (uint64_t)n;
    if ((rc = st_layer_writer_write(w, w->readbuf, (size_t)n, err)) < 0) {
      w->in_file = false;
      return rc;
    }
  }
  return st_layer_writer_end_file(w, err);
}

int st_layer_writer_add_file_at(st_layer_writer *w, st_entry *e, int dirfd, const char *path,
                                uint64_t size, const char *shown, st_error *err) {
  int rc = check_failed(w, err);
  if (rc < 0 || w->in_file || e->type != ST_ENTRY_REGULAR) {
    st_entry_clear(e);
    return rc < 0 ? rc : st_error_set(err, ST_EINVAL, "add_file_at: not a regular file");
  }
  struct file_rec *rec = calloc(1, sizeof *rec);
  struct whole_job *j = calloc(1, sizeof *j);
  char *p = strdup(path), *sh = strdup(shown);
  size_t entry = st_layer_index_count(w->idx);
  if (!rec || !j || !p || !sh || add_rec(w, rec) < 0) {
    free(rec);
    free(j);
    free(p);
    free(sh);
    st_entry_clear(e);
    return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  e->size = 0;
  if ((rc = st_layer_index_add(w->idx, e, err)) < 0) {
    w->n_files--;
    free(rec);
    free(j);
    free(p);
    free(sh);
    return rc;
  }
  *rec = (struct file_rec){.entry = entry, .whole = true};
  *j = (struct whole_job){w, rec, dirfd, p, sh, size};
  w->stats.files++;
  st_pool_submit(w->pool, whole_job_run, j);
  return ST_OK;
}

int st_layer_writer_wait(st_layer_writer *w, st_error *err) {
  st_pool_wait(w->pool);
  return check_failed(w, err);
}

/* Moves each file's chunk digests from its jobs into its index entry. */
static int assemble(st_layer_writer *w, st_error *err) {
  for (size_t i = 0; i < w->n_files; i++) {
    struct file_rec *f = w->files[i];
    st_entry *e = st_layer_index_entry_mut(w->idx, f->entry);
    if (f->whole)
      e->size = f->size;
    if (f->n_jobs == 0)
      continue;
    e->chunks = calloc(f->n_jobs, sizeof *e->chunks);
    if (!e->chunks)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    e->n_chunks = f->n_jobs;
    for (size_t j = 0; j < f->n_jobs; j++)
      e->chunks[j] = (st_chunk_ref){f->jobs[j]->digest, f->jobs[j]->len};
  }
  free_files(w);
  return ST_OK;
}

int st_layer_writer_mark_opaque(st_layer_writer *w, const char *path, st_error *err) {
  if (w->n_opaque >= ST_OPAQUE_MAX)
    return st_error_set(err, ST_ELIMIT, "more than %d opaque directories", ST_OPAQUE_MAX);
  int rc = st_path_check(path, err);
  if (rc < 0)
    return rc;
  char **n = realloc(w->opaque, (w->n_opaque + 1) * sizeof *n);
  if (!n)
    return st_error_set(err, ST_ENOMEM, "out of memory");
  w->opaque = n;
  if (!(n[w->n_opaque] = strdup(path)))
    return st_error_set(err, ST_ENOMEM, "out of memory");
  w->n_opaque++;
  return ST_OK;
}

/* Sets opaque on the last entry of each marked path (before normalize, which
 * keeps the last entry of a path), adding a directory where there is none. */
static int apply_opaque(st_layer_writer *w, st_error *err) {
  for (size_t o = 0; o < w->n_opaque; o++) {
    st_entry *last = NULL;
    for (size_t i = st_layer_index_count(w->idx); i-- > 0 && !last;) {
      st_entry *e = st_layer_index_entry_mut(w->idx, i);
      if (!strcmp(e->path, w->opaque[o]))
        last = e;
    }
    if (last && last->type != ST_ENTRY_DIR)
      return st_error_set(err, ST_EFORMAT, "'%s' is marked opaque but is not a directory",
                          w->opaque[o]);
    if (last) {
      last->opaque = true;
      continue;
    }
    const st_entry *low = w->lower ? st_layer_index_find(w->lower, w->opaque[o]) : NULL;
    st_entry d;
    int rc = st_entry_copy(&d, low && low->type == ST_ENTRY_DIR ? low : &w->dir_defaults, err);
    if (rc < 0)
      return rc;
    free(d.path);
    d.type = ST_ENTRY_DIR;
    d.opaque = true;
    if (!(d.path = strdup(w->opaque[o]))) {
      st_entry_clear(&d);
      return st_error_set(err, ST_ENOMEM, "out of memory");
    }
    if ((rc = st_layer_index_add(w->idx, &d, err)) < 0)
      return rc;
  }
  return ST_OK;
}

/* Everything finish does except storing the index. */
static int finish_common(st_layer_writer *w, st_error *err) {
  if (w->in_file)
    return st_error_set(err, ST_EINVAL, "finish: a file is still open");
  st_pool_wait(w->pool);
  int rc = check_failed(w, err);
  if (rc < 0)
    return rc;
  /* Chunks first, durable and visible, then the index that names them. */
  if ((rc = st_store_flush(w->store, err)) < 0)
    return rc;
  if ((rc = assemble(w, err)) < 0)
    return rc;
  if ((rc = apply_opaque(w, err)) < 0)
    return rc;
  return st_layer_index_normalize(w->idx, &w->dir_defaults, w->lower, err);
}

int st_layer_writer_finish_index(st_layer_writer *w, st_layer_index **index_out, st_error *err) {
  int rc = finish_common(w, err);
  if (rc == ST_OK)
    rc = st_layer_index_validate(w->idx, err);
  if (rc < 0)
    return rc;
  *index_out = w->idx;
  w->idx = NULL;
  return ST_OK;
}

int st_layer_writer_finish(st_layer_writer *w, st_digest *digest_out, st_layer_index **index_out,
                           st_error *err) {
  int rc = finish_common(w, err);
  if (rc < 0)
    return rc;
  if (digest_out)
    rc = st_layer_index_save(w->store, w->idx, digest_out, err);
  else /* kept in memory only: check what save would have checked */
    rc = st_layer_index_validate(w->idx, err);
  if (rc < 0)
    return rc;
  if (index_out) {
    *index_out = w->idx;
    w->idx = NULL;
  }
  return ST_OK;
}
