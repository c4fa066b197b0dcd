/* SPDX-License-Identifier: Apache-2.0 */
/* Image composition: layers merged bottom first into the one tree a
 * container sees, with overlay semantics. */
#pragma once

#include <stddef.h>

#include "layer-index.h"
#include "store.h"

/* Merges idxs[0] (bottom) .. idxs[n-1] (top):
 *  - an upper entry replaces a lower entry of the same path; an upper
 *    non-directory also hides everything below that path;
 *  - a WHITEOUT removes its path and everything below it from lower layers
 *    and does not appear in the result;
 *  - an opaque directory hides the lower layers' contents below it;
 *  - a hardlink whose target was replaced by an upper layer becomes a
 *    regular file with the content it had.
 * *out is a new, sorted, valid index (owned by caller). */
int st_compose_indexes(st_layer_index *const *idxs, size_t n, st_layer_index **out,
                       st_error *err);
/* Loads the layers from the store and composes them. */
int st_compose(st_store *s, const st_digest *layers, size_t n, st_layer_index **out,
               st_error *err);
