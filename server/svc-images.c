/* SPDX-License-Identifier: Apache-2.0 */
/* The Images service: Resolve (tag -> image digest), Get (manifest and layer
 * indexes as stored frames), Tag, List, and Missing (what a client must fetch
 * given the layers and chunks it has). */
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "dset.h"
#include "image.h"
#include "layer-index.h"
#include "svc-private.h"

static int recv_one(st_rpc_call *c, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                    st_error *err) {
  int r = st_rpc_recv(c, desc, out, err);
  if (r == 0)
    return st_error_set(err, ST_EINVAL, "missing %s", desc->name);
  return r < 0 ? r : ST_OK;
}

static int load_image(st_store *s, const ProtobufCBinaryData *digest, st_digest *d,
                      st_image **img, st_error *err) {
  int r = svc_digest(d, digest, "image digest", err);
  if (r < 0)
    return r;
  char hex[ST_DIGEST_HEX_LEN + 1];
  if ((r = st_store_has(s, ST_KIND_MANIFEST, d, err)) < 0)
    return r;
  if (r == 0)
    return st_error_set(err, ST_ENOENT, "image sha256:%s not found", st_digest_hex(d, hex));
  return st_image_load(img, s, d, err);
}

static int resolve(st_rpc_call *c, void *ud, st_error *err) {
  Strata__V1__ResolveRequest *req;
  int r = recv_one(c, &strata__v1__resolve_request__descriptor, (ProtobufCMessage **)&req, err);
  if (r < 0)
    return r;
  st_digest d;
  r = st_image_resolve(st_server_store(st_rpc_server(c)), req->ref, &d, err);
  protobuf_c_message_free_unpacked(&req->base, NULL);
  if (r < 0)
    return r;
  Strata__V1__ResolveResponse resp = STRATA__V1__RESOLVE_RESPONSE__INIT;
  resp.digest.data = d.bytes;
  resp.digest.len = ST_DIGEST_LEN;
  return st_rpc_send(c, &resp.base, err);
}

static int get_image(st_rpc_call *c, void *ud, st_error *err) {
  Strata__V1__GetImageRequest *req;
  int r = recv_one(c, &strata__v1__get_image_request__descriptor, (ProtobufCMessage **)&req, err);
  if (r < 0)
    return r;
  st_store *s = st_server_store(st_rpc_server(c));
  st_digest d;
  _cleanup_(st_image_freep) st_image *img = NULL;
  r = load_image(s, &req->digest, &d, &img, err);
  protobuf_c_message_free_unpacked(&req->base, NULL);
  if (r < 0)
    return r;
  r = svc_send_blob(c, ST_KIND_MANIFEST, &d, true, err);
  for (size_t i = 0; r == ST_OK && i < img->n_layers; i++)
    r = svc_send_blob(c, ST_KIND_INDEX, &img->layers[i].digest, true, err);
  return r;
}

static int tag(st_rpc_call *c, void *ud, st_error *err) {
  Strata__V1__TagRequest *req;
  int r = recv_one(c, &strata__v1__tag_request__descriptor, (ProtobufCMessage **)&req, err);
  if (r < 0)
    return r;
  st_store *s = st_server_store(st_rpc_server(c));
  st_digest d;
  _cleanup_(st_image_freep) st_image *img = NULL;
  _cleanup_free_ char *ref = NULL, *name = NULL, *tg = NULL;
  r = load_image(s, &req->digest, &d, &img, err);
  if (r == ST_OK && asprintf(&ref, "%s:%s", req->name, req->tag) < 0) {
    ref = NULL;
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  }
  if (r == ST_OK)
    r = st_image_ref_parse(ref, &name, &tg, err);
  if (r == ST_OK && strcmp(name, req->name))
    r = st_error_set(err, ST_EINVAL, "bad image name '%s'", req->name);
  if (r == ST_OK)
    r = st_tag_set(s, name, tg, &d, err);
  protobuf_c_message_free_unpacked(&req->base, NULL);
  if (r < 0)
    return r;
  Strata__V1__TagResponse resp = STRATA__V1__TAG_RESPONSE__INIT;
  return st_rpc_send(c, &resp.base, err);
}

struct list_ctx {
  Strata__V1__ImageTag *tags;
  size_t n, cap;
};

static int list_cb(const char *name, const char *tg, const st_digest *d, void *ud) {
  struct list_ctx *l = ud;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    Strata__V1__ImageTag *v = realloc(l->tags, cap * sizeof *v);
    if (!v)
      return ST_ENOMEM;
    l->tags = v;
    l->cap = cap;
  }
  Strata__V1__ImageTag *t = &l->tags[l->n];
  strata__v1__image_tag__init(t);
  t->name = strdup(name);
  t->tag = strdup(tg);
  t->digest.data = malloc(ST_DIGEST_LEN);
  if (!t->name || !t->tag || !t->digest.data) {
    free(t->name);
    free(t->tag);
    free(t->digest.data);
    return ST_ENOMEM;
  }
  memcpy(t->digest.data, d->bytes, ST_DIGEST_LEN);
  t->digest.len = ST_DIGEST_LEN;
  l->n++;
  return 0;
}

static int list(st_rpc_call *c, void *ud, st_error *err) {
  ProtobufCMessage *req;
  int r = recv_one(c, &strata__v1__list_images_request__descriptor, &req, err);
  if (r < 0)
    return r;
  protobuf_c_message_free_unpacked(req, NULL);
  struct list_ctx l = {0};
  r = st_tag_list(st_server_store(st_rpc_server(c)), list_cb, &l, err);
  if (r == ST_ENOMEM)
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  _cleanup_free_ Strata__V1__ImageTag **ptrs = calloc(l.n + 1, sizeof *ptrs);
  if (r == ST_OK && !ptrs)
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  if (r == ST_OK) {
    for (size_t i = 0; i < l.n; i++)
      ptrs[i] = &l.tags[i];
    Strata__V1__ListImagesResponse resp = STRATA__V1__LIST_IMAGES_RESPONSE__INIT;
    resp.n_images = l.n;
    resp.images = ptrs;
    r = st_rpc_send(c, &resp.base, err);
  }
  for (size_t i = 0; i < l.n; i++) {
    free(l.tags[i].name);
    free(l.tags[i].tag);
    free(l.tags[i].digest.data);
  }
  free(l.tags);
  return r;
}

/* Adds the digests of a repeated bytes field to set; ST_EINVAL for a bad one. */
static int fill_set(st_dset *set, const ProtobufCBinaryData *v, size_t n, const char *what,
                    st_error *err) {
  for (size_t i = 0; i < n; i++) {
    st_digest d;
    char w[48];
    snprintf(w, sizeof w, "%s #%zu", what, i);
    int r = svc_digest(&d, &v[i], w, err);
    if (r < 0)
      return r;
    if (st_dset_insert(set, &d, 0) < 0)
      return st_error_set(err, ST_ENOMEM, "out of memory");
  }
  return ST_OK;
}

struct digest_list {
  ProtobufCBinaryData *v;
  st_digest *d;
  size_t n, cap;
};

static int list_add(struct digest_list *l, const st_digest *d) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    st_digest *nd = realloc(l->d, cap * sizeof *nd);
    if (!nd)
      return ST_ENOMEM;
    l->d = nd;
    l->cap = cap;
  }
  l->d[l->n++] = *d;
  return ST_OK;
}

static int missing_walk(st_store *s, const st_image *img, st_dset *have_layers,
                        st_dset *have_chunks, struct digest_list *layers,
                        struct digest_list *chunks, uint64_t *bytes, st_error *err) {
  for (size_t i = 0; i < img->n_layers; i++) {
    const st_digest *ld = &img->layers[i].digest;
    if (st_dset_get(have_layers, ld, NULL))
      continue;
    if (st_dset_insert(have_layers, ld, 0) < 0 || list_add(layers, ld) < 0)
      return st_error_set(err, ST_ENOMEM, "out of memory");
    _cleanup_(st_layer_index_freep) st_layer_index *idx = NULL;
    int r = st_layer_index_load(&idx, s, ld, err);
    if (r < 0)
      return r;
    for (size_t j = 0; j < st_layer_index_count(idx); j++) {
      const st_entry *e = st_layer_index_entry(idx, j);
      for (size_t k = 0; k < e->n_chunks; k++) {
        r = st_dset_insert(have_chunks, &e->chunks[k].digest, 0);
        if (r < 0 || (r == 1 && list_add(chunks, &e->chunks[k].digest) < 0))
          return st_error_set(err, ST_ENOMEM, "out of memory");
        if (r == 1)
          *bytes += e->chunks[k].size;
      }
    }
  }
  return ST_OK;
}

static int to_binary(struct digest_list *l) {
  l->v = calloc(l->n + 1, sizeof *l->v);
  if (!l->v)
    return ST_ENOMEM;
  for (size_t i = 0; i < l->n; i++)
    l->v[i] = (ProtobufCBinaryData){ST_DIGEST_LEN, l->d[i].bytes};
  return ST_OK;
}

static int missing(st_rpc_call *c, void *ud, st_error *err) {
  Strata__V1__MissingRequest *req;
  int r = recv_one(c, &strata__v1__missing_request__descriptor, (ProtobufCMessage **)&req, err);
  if (r < 0)
    return r;
  st_store *s = st_server_store(st_rpc_server(c));
  _cleanup_(st_dset_freep) st_dset *have_layers = st_dset_new();
  _cleanup_(st_dset_freep) st_dset *have_chunks = st_dset_new();
  _cleanup_(st_image_freep) st_image *img = NULL;
  struct digest_list layers = {0}, chunks = {0};
  uint64_t bytes = 0;
  st_digest d;
  if (!have_layers || !have_chunks)
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  if (r == ST_OK)
    r = load_image(s, &req->digest, &d, &img, err);
  if (r == ST_OK)
    r = fill_set(have_layers, req->have_layers, req->n_have_layers, "have_layers", err);
  if (r == ST_OK)
    r = fill_set(have_chunks, req->have_chunks, req->n_have_chunks, "have_chunks", err);
  protobuf_c_message_free_unpacked(&req->base, NULL);
  if (r == ST_OK)
    r = missing_walk(s, img, have_layers, have_chunks, &layers, &chunks, &bytes, err);
  if (r == ST_OK && (to_binary(&layers) < 0 || to_binary(&chunks) < 0))
    r = st_error_set(err, ST_ENOMEM, "out of memory");
  if (r == ST_OK) {
    Strata__V1__MissingResponse resp = STRATA__V1__MISSING_RESPONSE__INIT;
    resp.n_layers = layers.n;
    resp.layers = layers.v;
    resp.n_chunks = chunks.n;
    resp.chunks = chunks.v;
    resp.chunk_bytes = bytes;
    r = st_rpc_send(c, &resp.base, err);
  }
  free(layers.v);
  free(layers.d);
  free(chunks.v);
  free(chunks.d);
  return r;
}

static const st_rpc_method methods[] = {
    {"/strata.v1.Images/Resolve", ST_ROLE_PULL, resolve},
    {"/strata.v1.Images/Get", ST_ROLE_PULL, get_image},
    {"/strata.v1.Images/Tag", ST_ROLE_PUSH, tag},
    {"/strata.v1.Images/List", ST_ROLE_PULL, list},
    {"/strata.v1.Images/Missing", ST_ROLE_PULL, missing},
};

int st_svc_images_register(st_server *srv, st_error *err) {
  return st_server_add_service(srv, "Images", methods, ST_ARRAY_SIZE(methods), NULL, NULL, err);
}
