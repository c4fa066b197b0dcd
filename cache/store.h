/* SPDX-License-Identifier: Apache-2.0 */
/* The content-addressed store: objects are SHA-256-addressed, zstd-compressed
 * (one frame each) and verified on every read. A store has a config (format
 * version, chunking parameters, zstd level) that every writer follows. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "chunker.h"
#include "digest.h"
#include "cleanup.h"
#include "error.h"

#define ST_STORE_FORMAT 1
/* Largest layer index or manifest accepted (uncompressed). */
#define ST_STORE_BLOB_MAX (256u << 20)

typedef struct {
  uint32_t format;
  st_chunk_params chunking;
  int zstd_level;
} st_store_config;

typedef struct st_store st_store;

st_store_config st_store_config_default(void);
/* Parses the config text; ST_EFORMAT/ST_EVERSION naming the line. */
int st_store_config_parse(st_store_config *out, const char *text, size_t len, st_error *err);
/* Renders the config text into a malloc'd string. */
char *st_store_config_format(const st_store_config *cfg);

/* Writes the config of a new store. Re-initialising with the same config is a
 * no-op; with a different one it is ST_EEXIST. */
int st_store_init_backend(st_backend *b, const st_store_config *cfg, st_error *err);
int st_store_init(const char *dir, const st_store_config *cfg, st_error *err);

enum {
  ST_STORE_CREATE = 1, /* initialise with defaults if DIR does not exist yet */
};
/* Opens DIR. A missing or unreadable config is an error naming DIR. */
int st_store_open(st_store **out, const char *dir, unsigned flags, st_error *err);
/* Opens a store over a backend (consumed, also on failure). */
int st_store_open_backend(st_store **out, st_backend *b, st_error *err);
/* Flushes nothing: unflushed puts are dropped. NULL is a no-op. */
void st_store_free(st_store *s);
ST_DEFINE_FREEP(st_store, st_store_free)

const st_store_config *st_store_get_config(const st_store *s);
st_backend *st_store_backend(st_store *s);
/* The largest uncompressed size an object of kind k may have in this store. */
size_t st_store_max_size(const st_store *s, st_kind k);

/* Hashes data, and unless the object is present compresses and stores it.
 * digest_out (nullable) gets the digest; stored_out (nullable) gets the
 * compressed bytes written (0 when it was already present). */
int st_store_put(st_store *s, st_kind k, const void *data, size_t len, st_digest *digest_out,
                 uint64_t *stored_out, st_error *err);
/* Same, when the caller already hashed data into *d. */
int st_store_put_hashed(st_store *s, st_kind k, const st_digest *d, const void *data, size_t len,
                        uint64_t *stored_out, st_error *err);
/* Stores a frame received from elsewhere after decompressing it and checking
 * its SHA-256 against d; a mismatch is ST_ECORRUPT naming d. */
int st_store_put_frame(st_store *s, st_kind k, const st_digest *d, const void *frame, size_t flen,
                       st_error *err);
/* 1 present, 0 absent, <0 error. */
int st_store_has(st_store *s, st_kind k, const st_digest *d, st_error *err);
/* Reads, decompresses and verifies. ST_ENOENT if absent; ST_ECORRUPT naming
 * the object if the frame is damaged or its content does not hash to d.
 * *data malloc'd (owned by caller). */
int st_store_get(st_store *s, st_kind k, const st_digest *d, uint8_t **data, size_t *len,
                 st_error *err);
/* The stored frame as it is, unverified (for sending on). */
int st_store_get_frame(st_store *s, st_kind k, const st_digest *d, uint8_t **frame, size_t *flen,
                       st_error *err);
int st_store_del(st_store *s, st_kind k, const st_digest *d, st_error *err);
int st_store_list(st_store *s, st_kind k, st_backend_list_cb cb, void *ud, st_error *err);
/* Makes all puts so far durable and visible. */
int st_store_flush(st_store *s, st_error *err);

/* Small named metadata (refs), passed through to the backend. */
int st_store_meta_get(st_store *s, const char *name, size_t max, uint8_t **data, size_t *len,
                      st_error *err);
int st_store_meta_put(st_store *s, const char *name, const void *data, size_t len, st_error *err);
int st_store_meta_del(st_store *s, const char *name, st_error *err);
int st_store_meta_list(st_store *s, const char *prefix, int (*cb)(const char *name, void *ud),
                       void *ud, st_error *err);

/* The store directory: --store, else $STRATA_STORE, else $XDG_DATA_HOME or
 * ~/.local/share + /strata/store, or /var/lib/strata/store for root.
 * Returns a malloc'd path. */
char *st_store_default_path(void);
