/* SPDX-License-Identifier: Apache-2.0 */
/* Layer index: in-memory entries, validation, and the protobuf-c codec. */
#include "layer-index.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "format.pb-c.h"

struct st_layer_index {
  st_chunk_params chunking;
  st_entry *entries;
  size_t n, cap;
};

st_layer_index *st_layer_index_new(const st_chunk_params *chunking) {
  st_layer_index *idx = calloc(1, sizeof *idx);
  if (idx)
    idx->chunking = *chunking;
  return idx;
}

void st_entry_clear(st_entry *e) {
  free(e->path);
  free(e->chunks);
  free(e->target);
  for (size_t i = 0; i < e->n_xattrs; i++) {
    free(e->xattrs[i].name);
    free(e->xattrs[i].value);
  }
  free(e->xattrs);
  memset(e, 0, sizeof *e);
}

int st_entry_copy(st_entry *dst, const st_entry *src, st_error *err) {
  *dst = *src;
  dst->path = strdup(src->path);
  dst->target = src->target ? strdup(src->target) : NULL;
  dst->chunks = NULL;
  dst->xattrs = NULL;
  dst->n_xattrs = 0;
  bool ok = dst->path && (!src->target || dst->target);
  if (ok && src->n_chunks) {
    dst->chunks = malloc(src->n_chunks * sizeof *dst->chunks);
    ok = dst->chunks != NULL;
    if (ok)
      memcpy(dst->chunks, src->chunks, src->n_chunks * sizeof *dst->chunks);
  }
  if (ok && src->n_xattrs) {
    dst->xattrs = calloc(src->n_xattrs, sizeof *dst->xattrs);
    ok = dst->xattrs != NULL;
    for (size_t i = 0; ok && i < src->n_xattrs; i++) {
      st_xattr *x = &dst->xattrs[i];
      x->name = strdup(src->xattrs[i].name);
      x->value = malloc(src->xattrs[i].len ? src->xattrs[i].len : 1);
      x->len = src->xattrs[i].len;
      dst->n_xattrs++;
      ok = x->name && x->value;
      if (ok && x->len)
        memcpy(x->value, src->xattrs[i].value, x->len);
    }
  }
  if (!ok) {
    st_entry_clear(dst);
    return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
  }
  return ST_OK;
}

void st_layer_index_free(st_layer_index *idx) {
  if (!idx)
    return;
  for (size_t i = 0; i < idx->n; i++)
    st_entry_clear(&idx->entries[i]);
  free(idx->entries);
  free(idx);
}

int st_layer_index_add(st_layer_index *idx, st_entry *e, st_error *err) {
  if (idx->n == idx->cap) {
    size_t cap = idx->cap ? idx->cap * 2 : 256;
    st_entry *n = realloc(idx->entries, cap * sizeof *n);
    if (!n) {
      st_entry_clear(e);
      return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
    }
    idx->entries = n;
    idx->cap = cap;
  }
  idx->entries[idx->n++] = *e;
  memset(e, 0, sizeof *e);
  return ST_OK;
}

size_t st_layer_index_count(const st_layer_index *idx) { return idx->n; }
const st_entry *st_layer_index_entry(const st_layer_index *idx, size_t i) {
  return &idx->entries[i];
}
st_entry *st_layer_index_entry_mut(st_layer_index *idx, size_t i) { return &idx->entries[i]; }
const st_chunk_params *st_layer_index_chunking(const st_layer_index *idx) {
  return &idx->chunking;
}

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->path, ((const st_entry *)b)->path);
}

void st_layer_index_sort(st_layer_index *idx) {
  if (idx->n > 1)
    qsort(idx->entries, idx->n, sizeof *idx->entries, entry_cmp);
}

struct order {
  const char *path;
  size_t pos;
};

static int order_cmp(const void *a, const void *b) {
  const struct order *x = a, *y = b;
  int c = strcmp(x->path, y->path);
  return c ? c : (x->pos < y->pos ? -1 : x->pos > y->pos);
}

static int add_dir(st_layer_index *idx, const char *path, size_t len, const st_entry *tmpl,
                   const st_layer_index *lower, st_error *err) {
  st_entry e = {.type = ST_ENTRY_DIR, .mode = tmpl->mode & 07777, .uid = tmpl->uid,
                .gid = tmpl->gid, .mtime = tmpl->mtime};
  e.path = strndup(path, len);
  if (!e.path)
    return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
  const st_entry *old = lower ? st_layer_index_find(lower, e.path) : NULL;
  if (old && old->type == ST_ENTRY_DIR) {
    st_entry copy;
    int rc = st_entry_copy(&copy, old, err);
    if (rc < 0) {
      free(e.path);
      return rc;
    }
    copy.opaque = false;
    free(e.path);
    e = copy;
  }
  return st_layer_index_add(idx, &e, err);
}

/* Resolves a hardlink chain to the regular file holding the content, or
 * SIZE_MAX. Entries must be sorted. */
static size_t hardlink_root(const st_layer_index *idx, size_t i) {
  for (int hops = 0; hops < 8; hops++) {
    const st_entry *e = &idx->entries[i];
    if (e->type == ST_ENTRY_REGULAR)
      return i;
    if (e->type != ST_ENTRY_HARDLINK || !e->target)
      return SIZE_MAX;
    const st_entry *t = st_layer_index_find(idx, e->target);
    if (!t)
      return SIZE_MAX;
    i = (size_t)(t - idx->entries);
  }
  return SIZE_MAX;
}

/* Within each group of hardlinked paths the first path in sorted order holds
 * the content and the others link to it, whatever order a source (an
 * archive) named them in. */
static int canonicalise_hardlinks(st_layer_index *idx, st_error *err) {
  size_t n = idx->n;
  size_t *root = malloc((n ? n : 1) * sizeof *root);   /* hardlink -> content holder */
  size_t *holder = malloc((n ? n : 1) * sizeof *holder); /* content holder -> first path */
  if (!root || !holder) {
    free(root);
    free(holder);
    return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    holder[i] = i;
    root[i] = SIZE_MAX;
  }
  for (size_t i = 0; i < n; i++) {
    if (idx->entries[i].type != ST_ENTRY_HARDLINK)
      continue;
    root[i] = hardlink_root(idx, i);
    if (root[i] != SIZE_MAX && i < holder[root[i]])
      holder[root[i]] = i;
  }
  for (size_t r = 0; r < n; r++) {
    size_t h = holder[r];
    if (h == r)
      continue;
    st_entry *re = &idx->entries[r], *he = &idx->entries[h];
    char *hpath = he->path, *rpath = re->path;
    free(he->target);
    he->target = NULL;
    st_entry moved = *re; /* the content and inode metadata move to h */
    moved.path = hpath;
    *re = (st_entry){.path = rpath, .type = ST_ENTRY_HARDLINK, .mode = moved.mode,
                     .uid = moved.uid, .gid = moved.gid, .mtime = moved.mtime};
    re->target = strdup(hpath);
    *he = moved;
    if (!re->target) {
      free(root);
      free(holder);
      return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (root[i] == SIZE_MAX || holder[root[i]] == i)
      continue;
    const char *want = idx->entries[holder[root[i]]].path;
    if (strcmp(idx->entries[i].target, want) != 0) {
      char *t = strdup(want);
      if (!t) {
        free(root);
        free(holder);
        return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
      }
      free(idx->entries[i].target);
      idx->entries[i].target = t;
    }
  }
  free(root);
  free(holder);
  return ST_OK;
}

int st_layer_index_normalize(st_layer_index *idx, const st_entry *tmpl,
                             const st_layer_index *lower, st_error *err) {
  /* 1. stable sort: by path, then insertion order; keep the last of each path */
  struct order *ord = malloc((idx->n ? idx->n : 1) * sizeof *ord);
  st_entry *sorted = malloc((idx->n ? idx->n : 1) * sizeof *sorted);
  if (!ord || !sorted) {
    free(ord);
    free(sorted);
    return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
  }
  for (size_t i = 0; i < idx->n; i++)
    ord[i] = (struct order){idx->entries[i].path, i};
  qsort(ord, idx->n, sizeof *ord, order_cmp);
  size_t m = 0;
  for (size_t i = 0; i < idx->n; i++) {
    st_entry *e = &idx->entries[ord[i].pos];
    if (i + 1 < idx->n && strcmp(ord[i].path, ord[i + 1].path) == 0)
      st_entry_clear(e); /* overridden by a later entry of the same path */
    else
      sorted[m++] = *e;
  }
  free(ord);
  free(idx->entries);
  idx->entries = sorted;
  idx->n = m;
  idx->cap = m ? m : 1;
  /* 2. missing parents (and the root) become directories */
  size_t n = idx->n;
  int rc = ST_OK;
  if (n == 0 || idx->entries[0].path[0] != '\0')
    rc = add_dir(idx, "", 0, tmpl, lower, err);
  for (size_t i = 0; i < n && rc == ST_OK; i++) {
    const char *p = idx->entries[i].path;
    for (const char *s = strchr(p, '/'); s && rc == ST_OK; s = strchr(s + 1, '/')) {
      char parent[ST_PATH_MAX + 1];
      size_t len = (size_t)(s - p);
      if (len > ST_PATH_MAX)
        break;
      memcpy(parent, p, len);
      parent[len] = '\0';
      /* entries [0, n) are sorted; added ones are checked linearly (few) */
      st_entry key = {.path = parent};
      if (bsearch(&key, idx->entries, n, sizeof *idx->entries, entry_cmp))
        continue;
      bool added = false;
      for (size_t j = n; j < idx->n && !added; j++)
        added = strcmp(idx->entries[j].path, parent) == 0;
      if (!added)
        rc = add_dir(idx, parent, len, tmpl, lower, err);
    }
  }
  if (rc == ST_OK)
    st_layer_index_sort(idx);
  if (rc == ST_OK)
    rc = canonicalise_hardlinks(idx, err);
  return rc;
}

const st_entry *st_layer_index_find(const st_layer_index *idx, const char *path) {
  st_entry key = {.path = (char *)path};
  return bsearch(&key, idx->entries, idx->n, sizeof *idx->entries, entry_cmp);
}

uint64_t st_layer_index_content_bytes(const st_layer_index *idx) {
  uint64_t sum = 0;
  for (size_t i = 0; i < idx->n; i++)
    if (idx->entries[i].type == ST_ENTRY_REGULAR)
      sum += idx->entries[i].size;
  return sum;
}

int st_path_check(const char *path, st_error *err) {
  size_t len = strlen(path);
  if (len == 0)
    return ST_OK;
  if (len > ST_PATH_MAX)
    return st_error_set(err, ST_EUNSAFE, "path '%.64s...' is longer than %d bytes", path,
                        ST_PATH_MAX);
  if (path[0] == '/')
    return st_error_set(err, ST_EUNSAFE, "path '%s' is absolute", path);
  const char *p = path;
  for (;;) {
    const char *slash = strchr(p, '/');
    size_t clen = slash ? (size_t)(slash - p) : strlen(p);
    if (clen == 0)
      return st_error_set(err, ST_EUNSAFE, "path '%s' has an empty component", path);
    if (clen > ST_NAME_MAX)
      return st_error_set(err, ST_EUNSAFE, "path '%s' has a component over %d bytes", path,
                          ST_NAME_MAX);
    if ((clen == 1 && p[0] == '.') || (clen == 2 && p[0] == '.' && p[1] == '.'))
      return st_error_set(err, ST_EUNSAFE, "path '%s' has a '%.*s' component", path, (int)clen,
                          p);
    if (!slash)
      break;
    p = slash + 1;
  }
  return ST_OK;
}

static int check_entry(const st_layer_index *idx, const st_entry *e, st_error *err) {
  const char *p = e->path;
  if (e->mode & ~07777u)
    return st_error_set(err, ST_EFORMAT, "entry '%s': mode %o has bits outside 07777", p, e->mode);
  if (e->type != ST_ENTRY_REGULAR && (e->n_chunks || e->size))
    return st_error_set(err, ST_EFORMAT, "entry '%s': only regular files have content", p);
  if (e->opaque && e->type != ST_ENTRY_DIR)
    return st_error_set(err, ST_EFORMAT, "entry '%s': only directories can be opaque", p);
  bool has_target = e->target && e->target[0];
  switch (e->type) {
  case ST_ENTRY_REGULAR: {
    uint64_t sum = 0;
    for (size_t i = 0; i < e->n_chunks; i++) {
      uint32_t sz = e->chunks[i].size;
      if (sz == 0 || sz > ST_CHUNK_MAX_LIMIT)
        return st_error_set(err, ST_EFORMAT, "entry '%s': chunk %zu has invalid size %u", p, i,
                            sz);
      sum += sz;
    }
    if (sum != e->size)
      return st_error_set(err, ST_EFORMAT, "entry '%s': size %llu but chunks hold %llu bytes", p,
                          (unsigned long long)e->size, (unsigned long long)sum);
    if (has_target)
      return st_error_set(err, ST_EFORMAT, "entry '%s': regular file with a target", p);
    break;
  }
  case ST_ENTRY_DIR:
  case ST_ENTRY_WHITEOUT:
    if (has_target)
      return st_error_set(err, ST_EFORMAT, "entry '%s': unexpected target", p);
    break;
  case ST_ENTRY_SYMLINK:
    if (!has_target || strlen(e->target) > ST_PATH_MAX)
      return st_error_set(err, ST_EFORMAT, "entry '%s': symlink without a valid target", p);
    break;
  case ST_ENTRY_HARDLINK: {
    if (!has_target)
      return st_error_set(err, ST_EFORMAT, "entry '%s': hardlink without a target", p);
    int rc = st_path_check(e->target, err);
    if (rc < 0)
      return st_error_prefix(err, "entry '%s': hardlink target", p);
    const st_entry *t = st_layer_index_find(idx, e->target);
    if (!t || t->type != ST_ENTRY_REGULAR || strcmp(e->target, p) >= 0)
      return st_error_set(err, ST_EFORMAT,
                          "entry '%s': hardlink target '%s' is not an earlier regular file", p,
                          e->target);
    break;
  }
  default:
    return st_error_set(err, ST_EFORMAT, "entry '%s': unknown type %d", p, (int)e->type);
  }
  for (size_t i = 0; i < e->n_xattrs; i++) {
    if (!e->xattrs[i].name[0] || e->xattrs[i].len > ST_XATTR_MAX)
      return st_error_set(err, ST_EFORMAT, "entry '%s': invalid xattr", p);
    if (i > 0 && strcmp(e->xattrs[i - 1].name, e->xattrs[i].name) >= 0)
      return st_error_set(err, ST_EFORMAT, "entry '%s': xattrs not sorted or duplicated", p);
  }
  return ST_OK;
}

int st_layer_index_validate(const st_layer_index *idx, st_error *err) {
  int rc = st_chunk_params_check(&idx->chunking, err);
  if (rc < 0)
    return st_error_set(err, ST_EFORMAT, "layer index: bad chunking parameters");
  if (idx->n == 0 || idx->entries[0].path[0] != '\0' || idx->entries[0].type != ST_ENTRY_DIR)
    return st_error_set(err, ST_EFORMAT, "layer index: the first entry must be the root directory");
  for (size_t i = 0; i < idx->n; i++) {
    const st_entry *e = &idx->entries[i];
    rc = st_path_check(e->path, err);
    if (rc < 0)
      return rc;
    if (i > 0 && strcmp(idx->entries[i - 1].path, e->path) >= 0)
      return st_error_set(err, ST_EFORMAT, "layer index: entry '%s' is out of order or repeated",
                          e->path);
    if (i > 0) {
      /* The parent must be a directory of this layer, so no entry can be
       * reached through a symlink or a file. */
      const char *slash = strrchr(e->path, '/');
      char parent[ST_PATH_MAX + 1];
      size_t plen = slash ? (size_t)(slash - e->path) : 0;
      memcpy(parent, e->path, plen);
      parent[plen] = '\0';
      const st_entry *pe = st_layer_index_find(idx, parent);
      if (!pe || pe->type != ST_ENTRY_DIR)
        return st_error_set(err, ST_EUNSAFE, "layer index: parent of '%s' is not a directory",
                            e->path);
    }
    rc = check_entry(idx, e, err);
    if (rc < 0)
      return rc;
  }
  return ST_OK;
}

/* ---- protobuf codec ---- */

static ProtobufCBinaryData bin(const void *p, size_t len) {
  return (ProtobufCBinaryData){len, (uint8_t *)p};
}

int st_layer_index_encode(const st_layer_index *idx, uint8_t **out, size_t *len, st_error *err) {
  int rc = st_layer_index_validate(idx, err);
  if (rc < 0)
    return rc;
  size_t n_chunks = 0, n_xattrs = 0;
  for (size_t i = 0; i < idx->n; i++) {
    n_chunks += idx->entries[i].n_chunks;
    n_xattrs += idx->entries[i].n_xattrs;
  }
  _cleanup_free_ Strata__V1__Entry *ents = calloc(idx->n, sizeof *ents);
  _cleanup_free_ Strata__V1__Entry **entp = calloc(idx->n, sizeof *entp);
  _cleanup_free_ Strata__V1__ChunkRef *refs = calloc(n_chunks + 1, sizeof *refs);
  _cleanup_free_ Strata__V1__ChunkRef **refp = calloc(n_chunks + 1, sizeof *refp);
  _cleanup_free_ Strata__V1__Xattr *xas = calloc(n_xattrs + 1, sizeof *xas);
  _cleanup_free_ Strata__V1__Xattr **xap = calloc(n_xattrs + 1, sizeof *xap);
  if (!ents || !entp || !refs || !refp || !xas || !xap)
    return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
  size_t ci = 0, xi = 0;
  for (size_t i = 0; i < idx->n; i++) {
    const st_entry *e = &idx->entries[i];
    Strata__V1__Entry *pe = &ents[i];
    strata__v1__entry__init(pe);
    pe->path = bin(e->path, strlen(e->path));
    pe->type = (Strata__V1__EntryType)e->type;
    pe->mode = e->mode;
    pe->uid = e->uid;
    pe->gid = e->gid;
    pe->mtime = e->mtime;
    pe->size = e->size;
    pe->opaque = e->opaque;
    if (e->target)
      pe->target = bin(e->target, strlen(e->target));
    pe->n_chunks = e->n_chunks;
    pe->chunks = &refp[ci];
    for (size_t c = 0; c < e->n_chunks; c++, ci++) {
      strata__v1__chunk_ref__init(&refs[ci]);
      refs[ci].digest = bin(e->chunks[c].digest.bytes, ST_DIGEST_LEN);
      refs[ci].size = e->chunks[c].size;
      refp[ci] = &refs[ci];
    }
    pe->n_xattrs = e->n_xattrs;
    pe->xattrs = &xap[xi];
    for (size_t x = 0; x < e->n_xattrs; x++, xi++) {
      strata__v1__xattr__init(&xas[xi]);
      xas[xi].name = bin(e->xattrs[x].name, strlen(e->xattrs[x].name));
      xas[xi].value = bin(e->xattrs[x].value, e->xattrs[x].len);
      xap[xi] = &xas[xi];
    }
    entp[i] = pe;
  }
  Strata__V1__ChunkingParams cp = STRATA__V1__CHUNKING_PARAMS__INIT;
  cp.min = idx->chunking.min;
  cp.avg = idx->chunking.avg;
  cp.max = idx->chunking.max;
  Strata__V1__LayerIndex li = STRATA__V1__LAYER_INDEX__INIT;
  li.version = ST_LAYER_INDEX_VERSION;
  li.chunking = &cp;
  li.n_entries = idx->n;
  li.entries = entp;
  size_t sz = strata__v1__layer_index__get_packed_size(&li);
  uint8_t *buf = malloc(sz ? sz : 1);
  if (!buf)
    return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
  *len = strata__v1__layer_index__pack(&li, buf);
  *out = buf;
  return ST_OK;
}

/* Copies bytes into a NUL-terminated string; NUL bytes inside are invalid. */
static int bin_str(const ProtobufCBinaryData *b, char **out, const char *what, st_error *err) {
  if (b->len && memchr(b->data, 0, b->len))
    return st_error_set(err, ST_EFORMAT, "layer index: %s contains a NUL byte", what);
  char *s = malloc(b->len + 1);
  if (!s)
    return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
  if (b->len)
    memcpy(s, b->data, b->len);
  s[b->len] = '\0';
  *out = s;
  return ST_OK;
}

static int convert_entry(const Strata__V1__Entry *pe, st_entry *e, st_error *err) {
  int rc = bin_str(&pe->path, &e->path, "a path", err);
  if (rc < 0)
    return rc;
  e->type = (st_entry_type)pe->type;
  e->mode = pe->mode;
  e->uid = pe->uid;
  e->gid = pe->gid;
  e->mtime = pe->mtime;
  e->size = pe->size;
  e->opaque = pe->opaque;
  if (pe->target.len && (rc = bin_str(&pe->target, &e->target, "a target", err)) < 0)
    return rc;
  if (pe->n_chunks) {
    e->chunks = calloc(pe->n_chunks, sizeof *e->chunks);
    if (!e->chunks)
      return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
    e->n_chunks = pe->n_chunks;
    for (size_t c = 0; c < pe->n_chunks; c++) {
      if (pe->chunks[c]->digest.len != ST_DIGEST_LEN)
        return st_error_set(err, ST_EFORMAT, "layer index: entry '%s': chunk digest of %zu bytes",
                            e->path, pe->chunks[c]->digest.len);
      memcpy(e->chunks[c].digest.bytes, pe->chunks[c]->digest.data, ST_DIGEST_LEN);
      e->chunks[c].size = pe->chunks[c]->size;
    }
  }
  if (pe->n_xattrs) {
    e->xattrs = calloc(pe->n_xattrs, sizeof *e->xattrs);
    if (!e->xattrs)
      return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
    for (size_t x = 0; x < pe->n_xattrs; x++, e->n_xattrs++) {
      st_xattr *xa = &e->xattrs[x];
      if ((rc = bin_str(&pe->xattrs[x]->name, &xa->name, "an xattr name", err)) < 0)
        return rc;
      xa->len = pe->xattrs[x]->value.len;
      xa->value = malloc(xa->len ? xa->len : 1);
      if (!xa->value)
        return st_error_set(err, ST_ENOMEM, "layer index: out of memory");
      if (xa->len)
        memcpy(xa->value, pe->xattrs[x]->value.data, xa->len);
    }
  }
  return ST_OK;
}


int st_layer_index_decode(st_layer_index **out, const uint8_t *data, size_t len, st_error *err) {
  Strata__V1__LayerIndex *li = strata__v1__layer_index__unpack(NULL, len, data);
  if (!li)
    return st_error_set(err, ST_EFORMAT, "layer index: malformed or truncated message");
  int rc = ST_OK;
  _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
  if (li->version != ST_LAYER_INDEX_VERSION) {
    rc = st_error_set(err, ST_EVERSION, "layer index: version %u is not supported (want %d)",
                      li->version, ST_LAYER_INDEX_VERSION);
    goto out;
  }
  st_chunk_params cp = {0, 0, 0};
  if (li->chunking)
    cp = (st_chunk_params){li->chunking->min, li->chunking->avg, li->chunking->max};
  idx = st_layer_index_new(&cp);
  if (!idx) {
    rc = st_error_set(err, ST_ENOMEM, "layer index: out of memory");
    goto out;
  }
  for (size_t i = 0; i < li->n_entries && rc == ST_OK; i++) {
    st_entry e = {0};
    rc = convert_entry(li->entries[i], &e, err);
    if (rc < 0)
      st_entry_clear(&e);
    else
      rc = st_layer_index_add(idx, &e, err);
  }
  if (rc == ST_OK)
    rc = st_layer_index_validate(idx, err);
  if (rc == ST_OK)
    *out = ST_TAKE_PTR(idx);
out:
  strata__v1__layer_index__free_unpacked(li, NULL);
  return rc;
}

int st_layer_index_save(st_store *s, const st_layer_index *idx, st_digest *digest_out,
                        st_error *err) {
  _cleanup_free_ uint8_t *buf = NULL;
  size_t len;
  int rc = st_layer_index_encode(idx, &buf, &len, err);
  if (rc < 0)
    return rc;
  rc = st_store_put(s, ST_KIND_INDEX, buf, len, digest_out, NULL, err);
  if (rc < 0)
    return rc;
  return st_store_flush(s, err);
}

int st_layer_index_load(st_layer_index **out, st_store *s, const st_digest *d, st_error *err) {
  _cleanup_free_ uint8_t *buf = NULL;
  size_t len;
  char hex[ST_DIGEST_HEX_LEN + 1];
  int rc = st_store_get(s, ST_KIND_INDEX, d, &buf, &len, err);
  if (rc == ST_ENOENT)
    return st_error_set(err, ST_ENOENT, "layer %s not found", st_digest_hex(d, hex));
  if (rc < 0)
    return rc;
  rc = st_layer_index_decode(out, buf, len, err);
  return rc < 0 ? st_error_prefix(err, "layer %s", st_digest_hex(d, hex)) : ST_OK;
}

/* ---- diff ---- */

static bool same_chunks(const st_entry *a, const st_entry *b) {
  if (a->size != b->size || a->n_chunks != b->n_chunks)
    return false;
  for (size_t i = 0; i < a->n_chunks; i++)
    if (!st_digest_equal(&a->chunks[i].digest, &b->chunks[i].digest))
      return false;
  return true;
}

static bool same_xattrs(const st_entry *a, const st_entry *b) {
  if (a->n_xattrs != b->n_xattrs)
    return false;
  for (size_t i = 0; i < a->n_xattrs; i++)
    if (strcmp(a->xattrs[i].name, b->xattrs[i].name) || a->xattrs[i].len != b->xattrs[i].len ||
        memcmp(a->xattrs[i].value, b->xattrs[i].value, a->xattrs[i].len))
      return false;
  return true;
}

static unsigned entry_changes(const st_entry *a, const st_entry *b) {
  unsigned c = 0;
  if (a->type != b->type)
    return ST_DIFF_TYPE;
  if (!same_chunks(a, b))
    c |= ST_DIFF_CONTENT;
  if (a->mode != b->mode || a->opaque != b->opaque)
    c |= ST_DIFF_MODE;
  if (a->uid != b->uid || a->gid != b->gid)
    c |= ST_DIFF_OWNER;
  if (a->mtime != b->mtime)
    c |= ST_DIFF_MTIME;
  if (strcmp(a->target ? a->target : "", b->target ? b->target : ""))
    c |= ST_DIFF_TARGET;
  if (!same_xattrs(a, b))
    c |= ST_DIFF_XATTRS;
  return c;
}

int st_layer_index_diff(const st_layer_index *a, const st_layer_index *b, st_diff_cb cb,
                        void *ud) {
  size_t i = 0, j = 0;
  while (i < a->n || j < b->n) {
    int cmp = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->entries[i].path, b->entries[j].path);
    int rc = 0;
    if (cmp < 0) {
      rc = cb(&a->entries[i++], NULL, 0, ud);
    } else if (cmp > 0) {
      rc = cb(NULL, &b->entries[j++], 0, ud);
    } else {
      unsigned c = entry_changes(&a->entries[i], &b->entries[j]);
      if (c)
        rc = cb(&a->entries[i], &b->entries[j], c, ud);
      i++;
      j++;
    }
    if (rc)
      return rc;
  }
  return 0;
}
