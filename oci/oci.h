/* SPDX-License-Identifier: Apache-2.0 */
/* OCI image interop: the image layout, index, manifest and config JSON
 * (parsed and written with jansson), layer tars made from strata layer
 * indexes, publishing an image to a layout directory or a registry. The
 * formats are the OCI image spec v1.1; docs/OCI.md says what strata reads
 * and writes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"
#include "digest.h"
#include "error.h"
#include "image.h"
#include "layer-index.h"
#include "store.h"

#define ST_OCI_MT_INDEX "application/vnd.oci.image.index.v1+json"
#define ST_OCI_MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define ST_OCI_MT_CONFIG "application/vnd.oci.image.config.v1+json"
#define ST_OCI_MT_LAYER "application/vnd.oci.image.layer.v1.tar"
#define ST_OCI_MT_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define ST_OCI_MT_LAYER_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
#define ST_DOCKER_MT_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define ST_DOCKER_MT_CONFIG "application/vnd.docker.container.image.v1+json"
#define ST_DOCKER_MT_LAYER_GZIP "application/vnd.docker.image.rootfs.diff.tar.gzip"
#define ST_OCI_REF_NAME "org.opencontainers.image.ref.name"

/* Largest JSON document read (index, manifest, config). */
#define ST_OCI_JSON_MAX (4u << 20)
/* Most entries in one list (manifests, layers, env, labels, argv). */
#define ST_OCI_LIST_MAX 4096

/* A content descriptor. */
typedef struct {
  char *media_type; /* owned */
  st_digest digest; /* sha256 only */
  uint64_t size;
  char *ref_name;   /* owned, nullable: annotation org.opencontainers.image.ref.name */
} st_oci_desc;

typedef struct {
  st_oci_desc *manifests; /* owned */
  size_t n;
} st_oci_index;

typedef struct {
  char *media_type; /* owned, nullable */
  st_oci_desc config;
  st_oci_desc *layers; /* owned, bottom first */
  size_t n_layers;
} st_oci_manifest;

/* The parts of an image config strata uses. */
typedef struct {
  st_kv *env;       /* owned, in the order given, "K=V" split at the first '=' */
  size_t n_env;
  char **entrypoint; /* owned */
  size_t n_entrypoint;
  bool has_entrypoint;
  char **cmd;       /* owned */
  size_t n_cmd;
  bool has_cmd;
  char *workdir;    /* owned, nullable */
  st_kv *labels;    /* owned, sorted by key */
  size_t n_labels;
  st_digest *diff_ids; /* owned */
  size_t n_diff_ids;
} st_oci_config;

/* Parsers: data is untrusted JSON of len bytes (no NUL needed). Errors are
 * ST_EFORMAT with one line naming what is wrong (the caller prefixes the
 * file or blob); ST_ELIMIT past the limits above. *out written on success. */
int st_oci_index_parse(st_oci_index **out, const uint8_t *data, size_t len, st_error *err);
int st_oci_manifest_parse(st_oci_manifest **out, const uint8_t *data, size_t len, st_error *err);
int st_oci_config_parse(st_oci_config **out, const uint8_t *data, size_t len, st_error *err);
void st_oci_index_free(st_oci_index *x);
void st_oci_manifest_free(st_oci_manifest *m);
void st_oci_config_free(st_oci_config *c);
ST_DEFINE_FREEP(st_oci_index, st_oci_index_free)
ST_DEFINE_FREEP(st_oci_manifest, st_oci_manifest_free)
ST_DEFINE_FREEP(st_oci_config, st_oci_config_free)
/* manifest.json of a docker archive (docker save, docker-archive): one
 * entry per image. */
typedef struct {
  char *config;     /* owned: the member holding the config */
  char **repo_tags; /* owned, may be empty: "name:tag" */
  size_t n_repo_tags;
  char **layers;    /* owned: members holding the layer tars, bottom first */
  size_t n_layers;
} st_docker_image;

typedef struct {
  st_docker_image *images; /* owned, at least one */
  size_t n;
} st_docker_manifest;

int st_docker_manifest_parse(st_docker_manifest **out, const uint8_t *data, size_t len,
                             st_error *err);
void st_docker_manifest_free(st_docker_manifest *m);
ST_DEFINE_FREEP(st_docker_manifest, st_docker_manifest_free)
/* True for the layer media types strata reads (tar, +gzip, +zstd, docker's). */
bool st_oci_layer_type_ok(const char *media_type);

/* Writers: deterministic JSON (sorted keys, compact), *out malloc'd. */
/* The config of img with the given diff_ids (one per layer). */
int st_oci_config_json(const st_image *img, const st_digest *diff_ids, char **out, size_t *len,
                       st_error *err);
/* A manifest naming config and layers (layer media types as given). */
int st_oci_manifest_json(const st_oci_desc *config, const st_oci_desc *layers, size_t n,
                         char **out, size_t *len, st_error *err);
/* index.json: old (nullable, the current index.json text) with every
 * manifest tagged `tag` replaced by desc (other entries are kept as they
 * are); ST_EFORMAT if old is not an image index. */
int st_oci_index_json(const uint8_t *old, size_t old_len, const st_oci_desc *desc,
                      char **out, size_t *len, st_error *err);

/* ---- image layout directories ---- */

typedef struct st_oci_layout st_oci_layout;
/* Opens the layout at path: oci-layout must say version 1.x, index.json is
 * parsed. Errors name path and the file. */
int st_oci_layout_open(st_oci_layout **out, const char *path, st_error *err);
void st_oci_layout_free(st_oci_layout *l);
ST_DEFINE_FREEP(st_oci_layout, st_oci_layout_free)
const char *st_oci_layout_path(const st_oci_layout *l);
/* The manifest descriptor for ref (a ref.name annotation), or with ref NULL
 * the only manifest. ST_ENOENT for an unknown ref, ST_EINVAL when ref is NULL
 * and there are several. */
int st_oci_layout_resolve(const st_oci_layout *l, const char *ref, const st_oci_desc **out,
                          st_error *err);
/* Reads a small blob (at most max bytes) and checks its size and digest.
 * ST_ECORRUPT naming the blob on a mismatch. */
int st_oci_blob_read(const st_oci_layout *l, const st_oci_desc *d, size_t max, uint8_t **out,
                     size_t *len, st_error *err);
/* Resolves ref, reads and parses the manifest and the config. manifest_digest
 * (nullable) gets the manifest's digest. */
int st_oci_layout_image(const st_oci_layout *l, const char *ref, st_oci_manifest **m_out,
                        st_oci_config **c_out, st_digest *manifest_digest, st_error *err);

/* ---- importing an image (oci: sources) ---- */

/* An image to import: one manifest of an OCI layout (a directory, or packed
 * in a tarball), or one image of a docker archive (`docker save`,
 * `docker-archive:`; a tarball with manifest.json). */
typedef struct st_oci_src st_oci_src;
/* Opens path (a directory or a tarball), selects ref (nullable: the only
 * image; an OCI ref.name annotation, or one of a docker image's RepoTags,
 * "name:tag", docker.io names normalised) and reads and verifies its
 * manifest and config: blobs against their descriptors, docker members
 * named by their digest (<hex>.json, blobs/sha256/<hex>) against it, one
 * diff_id per layer, every layer member present. Errors name path and the
 * file, blob or member: ST_EFORMAT, ST_ECORRUPT, ST_ENOENT (an unknown ref
 * or missing member; the message lists the refs there are), ST_EINVAL
 * (several images and no ref). */
int st_oci_src_open(st_oci_src **out, const char *path, const char *ref, st_error *err);
void st_oci_src_free(st_oci_src *s);
ST_DEFINE_FREEP(st_oci_src, st_oci_src_free)
const char *st_oci_src_path(const st_oci_src *s);
const st_oci_config *st_oci_src_config(const st_oci_src *s);
/* Hands the config out (the source keeps none). */
st_oci_config *st_oci_src_take_config(st_oci_src *s);
/* What names the image's content: the manifest digest (OCI), the config's
 * digest (docker archives: its diff_ids name every layer, checked on
 * import). */
const st_digest *st_oci_src_key(const st_oci_src *s);
size_t st_oci_src_layers(const st_oci_src *s);
/* "blob sha256:<hex>" or "member <name>" for layer i, into buf. */
const char *st_oci_src_layer_name(const st_oci_src *s, size_t i, char *buf, size_t size);

struct archive;
/* Adds to a reader the decompression filters strata reads (an explicit
 * list: gzip, bzip2, xz, lzma, zstd, lz4, compress; none that runs an
 * external program). */
void st_oci_archive_filters(struct archive *a);

/* Layer i being read in one pass: its blob is hashed as it streams,
 * decompressed (gzip, zstd, ... or none, whatever it is), and the
 * uncompressed tar hashed for its diff_id as it feeds a tar reader. */
typedef struct st_oci_layer_reader st_oci_layer_reader;
int st_oci_layer_reader_open(st_oci_layer_reader **out, const st_oci_src *s, size_t i,
                             st_error *err);
/* The tar reader (owned by r) of the layer's entries. */
struct archive *st_oci_layer_reader_tar(st_oci_layer_reader *r);
/* After the tar reader's end: reads the rest, then checks the blob's size
 * and digest (ST_ECORRUPT "content does not match its digest") and the
 * uncompressed tar's SHA-256 against the config's diff_id (ST_ECORRUPT
 * naming both). Errors are detail only: the caller names the layer. */
int st_oci_layer_reader_finish(st_oci_layer_reader *r, st_error *err);
void st_oci_layer_reader_free(st_oci_layer_reader *r);
ST_DEFINE_FREEP(st_oci_layer_reader, st_oci_layer_reader_free)

/* ---- layer tars ---- */

typedef enum { ST_OCI_GZIP = 0, ST_OCI_ZSTD = 1 } st_oci_compression;

typedef struct {
  st_digest digest;  /* of the compressed blob */
  st_digest diff_id; /* of the uncompressed tar */
  uint64_t size;     /* compressed bytes */
  uint64_t tar_size;
} st_oci_blob_info;

/* Parallel gzip (gzip-blocks.c): the input in blocks of ST_OCI_GZIP_BLOCK
 * bytes, each compressed on a worker (libdeflate, level 6) into one gzip
 * member (no name, time 0), the members in order. The output depends only
 * on the input: not on the number of workers. */
#define ST_OCI_GZIP_BLOCK (1u << 20)
/* Workers and a bound on blocks in memory, shared by several streams. */
typedef struct st_oci_gzip_pool st_oci_gzip_pool;
/* threads 0: each block is deflated in the writing thread. ST_ENOMEM/ST_EIO. */
int st_oci_gzip_pool_new(st_oci_gzip_pool **out, unsigned threads, st_error *err);
/* No stream may be using it any more. NULL is a no-op. */
void st_oci_gzip_pool_free(st_oci_gzip_pool *gp);
/* One gzip stream; its bytes go, in order, to out_fn in the writing thread
 * (returning < 0 fails the stream). */
typedef struct st_oci_gzip st_oci_gzip;
typedef int (*st_oci_gzip_out_fn)(void *ud, const uint8_t *p, size_t n);
/* gp nullable: a private pool without workers. ST_ENOMEM. */
int st_oci_gzip_new(st_oci_gzip **out, st_oci_gzip_pool *gp, st_oci_gzip_out_fn out_fn, void *ud,
                    st_error *err);
/* Returns 0, or -1 once out_fn failed, deflate failed or memory ran out;
 * then the stream only waits for its blocks in st_oci_gzip_free. */
int st_oci_gzip_write(st_oci_gzip *z, const void *data, size_t n);
/* The last block and the trailer. 0 or -1 as st_oci_gzip_write. */
int st_oci_gzip_finish(st_oci_gzip *z);
/* Waits for the stream's blocks still at the workers, frees. NULL: no-op. */
void st_oci_gzip_free(st_oci_gzip *z);

/* Writes the layer idx as a compressed tar to fd: entries in index order,
 * directories with a trailing '/', whiteouts as .wh.NAME, opaque directories
 * followed by DIR/.wh..wh..opq, hardlinks as tar hardlinks, xattrs as PAX
 * records, owners as numbers, mtimes from the index; gzip without name or
 * time, so the same layer always gives the same bytes. Contents are read
 * (and verified) from s. gz (nullable) deflates gzip blocks in parallel. */
int st_oci_layer_write(st_store *s, const st_layer_index *idx, st_oci_compression c,
                       st_oci_gzip_pool *gz, int fd, st_oci_blob_info *out, st_error *err);

/* ---- publishing ---- */

typedef struct {
  st_oci_compression compression;
  unsigned threads; /* layers made in parallel (0 = one at a time) */
  bool progress;    /* draw a progress line */
  /* registry */
  bool insecure;    /* plain HTTP */
  /* nullable: basic credentials, sent to a registry that asks for Basic
   * auth, or to its token server when it asks for a Bearer token */
  const char *user, *password;
  const char *token;   /* nullable: a bearer token obtained beforehand */
  const char *ca_file; /* nullable: CA bundle for HTTPS (else the system's) */
} st_oci_publish_opts;

typedef struct {
  st_digest manifest;
  uint64_t manifest_size;
  size_t layers;
  size_t layers_made;      /* layer tars produced (not found in the cache/target) */
  size_t blobs_uploaded;   /* registry: blobs sent */
  uint64_t bytes_uploaded; /* registry: blob bytes sent (layers and config) */
  uint64_t layer_bytes_uploaded;
  uint64_t bytes_total;    /* compressed size of all layers */
} st_oci_publish_result;

/* Writes image `ref` of s as manifest `tag` of the layout at dir (created
 * if missing; other tags are kept). Layer blobs already in the layout are
 * not written again. */
int st_oci_publish_layout(st_store *s, const st_image *img, const char *dir, const char *tag,
                          const st_oci_publish_opts *o, st_oci_publish_result *res,
                          st_error *err);
/* Pushes the image to target "HOST[:PORT]/REPO:TAG" over the OCI
 * distribution API: blobs the registry lacks (HEAD) are uploaded, then the
 * manifest is put. A 401 is answered as its WWW-Authenticate asks: Basic
 * with o->user, or Bearer with a token fetched from the challenge's realm
 * (scope repository:REPO:pull,push and whatever else is challenged; basic
 * credentials sent there when given), kept for the push and fetched again
 * when a new scope is challenged or it expired. Refused credentials are
 * ST_EAUTH naming the registry (or token server) and the HTTP status. */
int st_oci_publish_registry(st_store *s, const st_image *img, const char *target,
                            const st_oci_publish_opts *o, st_oci_publish_result *res,
                            st_error *err);
