/* SPDX-License-Identifier: Apache-2.0 */
/* The plain main() shared by the fuzz targets when they are not built with
 * libFuzzer: replays every file of a seed corpus, then deterministic
 * mutations of each (bit flips, byte changes, truncations, insertions of
 * bytes that matter to text formats), so each target also runs as an
 * ordinary test. Usage: fuzz-NAME CORPUS_DIR [ROUNDS]. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rng = 0x1234567;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static const char interesting[] = ":-[]{},\"'&*!#|>$ \n\t/.0123456789";

static void mutate_and_run(const uint8_t *seed, size_t len, int rounds) {
  uint8_t *buf = malloc(len + 64);
  for (int r = 0; r < rounds; r++) {
    size_t n = len;
    memcpy(buf, seed, len);
    int edits = 1 + (int)(next() % 4);
    for (int e = 0; e < edits && n > 0; e++) {
      switch (next() % 4) {
      case 0: buf[next() % n] ^= (uint8_t)(1u << (next() % 8)); break;
      case 1: buf[next() % n] = (uint8_t)next(); break;
      case 2: n = next() % n; break;
      default:
        if (n + 1 < len + 64) {
          size_t at = next() % n;
          memmove(buf + at + 1, buf + at, n - at);
          buf[at] = next() % 2 ? (uint8_t)interesting[next() % (sizeof interesting - 1)]
                               : (uint8_t)next();
          n++;
        }
      }
    }
    LLVMFuzzerTestOneInput(buf, n);
  }
  free(buf);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : NULL;
  int rounds = argc > 2 ? atoi(argv[2]) : 1000;
  DIR *d = dir ? opendir(dir) : NULL;
  if (!d) {
    fprintf(stderr, "usage: %s CORPUS_DIR [ROUNDS]\n", argv[0]);
    return 2;
  }
  int seeds = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.')
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    uint8_t *data = NULL;
    size_t len = 0;
    if (st_read_file_at(AT_FDCWD, path, 1 << 20, &data, &len, NULL) < 0)
      continue;
    LLVMFuzzerTestOneInput(data, len);
    mutate_and_run(data, len, rounds);
    free(data);
    seeds++;
  }
  closedir(d);
  printf("%d seeds, %d mutations each: no crash\n", seeds, rounds);
  return seeds > 0 ? 0 : 1;
}
