/* SPDX-License-Identifier: Apache-2.0 */
/* The zstd codec: one frame per object, the frame always records its content
 * size, and decompression is bounded by a caller-given maximum. Compression
 * and decompression contexts are pooled so that worker threads reuse them. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct st_codec st_codec;

/* level is a zstd level (1..19 accepted). *out written only on success. */
int st_codec_new(st_codec **out, int level, st_error *err);
void st_codec_free(st_codec *codec);
int st_codec_level(const st_codec *codec);

/* Compresses len bytes into one frame; *out is malloc'd (owned by caller). */
int st_codec_compress(st_codec *codec, const void *src, size_t len, uint8_t **out,
                      size_t *out_len, st_error *err);

/* Content size recorded in a frame header, or ST_ECORRUPT if the header is
 * missing, truncated or does not record a size. */
int st_codec_frame_size(const void *frame, size_t flen, uint64_t *size_out, st_error *err);

/* Decompresses one frame whose recorded content size must be <= max into a
 * malloc'd buffer (owned by caller; one extra NUL byte is appended). A
 * truncated frame, trailing bytes or a size mismatch is ST_ECORRUPT; a size
 * above max is ST_ELIMIT. */
int st_codec_decompress(st_codec *codec, const void *frame, size_t flen, size_t max,
                        uint8_t **out, size_t *out_len, st_error *err);
