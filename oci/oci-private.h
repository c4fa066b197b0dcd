/* SPDX-License-Identifier: Apache-2.0 */
/* Private to oci/publish.c and oci/registry.c: layer blobs made from strata
 * layers into a directory, with the store remembering each layer's blob
 * digest so that a later publish can skip making blobs the target has. */
#pragma once

#include "oci.h"

/* The blob info recorded for layer+compression by an earlier publish. */
bool st_oci_cache_get(st_store *s, const st_digest *layer, st_oci_compression c,
                      st_oci_blob_info *out);

/* Makes the blob of each layer i with want[i] into dir/<hex of its digest>
 * (layers in parallel on `threads` workers), and records them in the
 * store's cache. infos[i] gets the blob info; a layer whose cache entry
 * existed must give the same digest (else ST_ECORRUPT: not deterministic).
 * progress (nullable) counts layer content bytes. */
int st_oci_make_layers(st_store *s, const st_image *img, const bool *want, st_oci_compression c,
                       const char *dir, unsigned threads, bool progress,
                       st_oci_blob_info *infos, st_error *err);

/* Writes data to dir/<hex of digest> (temp name + rename) unless present. */
int st_oci_write_blob(const char *dir, const void *data, size_t len, st_digest *digest_out,
                      st_error *err);

/* Config and manifest of img for the given layer infos. *_json malloc'd. */
int st_oci_image_docs(const st_image *img, const st_oci_blob_info *infos, st_oci_compression c,
                      char **config_json, size_t *config_len, char **manifest_json,
                      size_t *manifest_len, st_error *err);

const char *st_oci_layer_media_type(st_oci_compression c);
