/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the layer index decoder (outside input: indexes come from
 * stores and from the network). Property: decoding never crashes or leaks,
 * and whatever decodes re-encodes to bytes that decode to the same index.
 * Built with -fsanitize=fuzzer when -Dfuzzing=true (clang); otherwise the
 * main() of replay.c replays the seed corpus plus deterministic mutations of it,
 * so the target also runs as an ordinary test. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "layer-index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_layer_index *idx = NULL;
  if (st_layer_index_decode(&idx, data, size, NULL) < 0)
    return 0;
  uint8_t *a = NULL, *b = NULL;
  size_t la, lb;
  st_layer_index *again = NULL;
  if (st_layer_index_encode(idx, &a, &la, NULL) < 0 ||
      st_layer_index_decode(&again, a, la, NULL) < 0 ||
      st_layer_index_encode(again, &b, &lb, NULL) < 0 || la != lb || memcmp(a, b, la) != 0)
    abort(); /* a decoded index must survive a round trip unchanged */
  free(a);
  free(b);
  st_layer_index_free(again);
  st_layer_index_free(idx);
  return 0;
}
