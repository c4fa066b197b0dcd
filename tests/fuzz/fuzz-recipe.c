/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the recipe loader (outside input: recipes come from users and over the
 * network). Property: loading never crashes or leaks, errors are one line, and whatever
 * loads yields at least one cell and every cell either instantiates (against a base
 * directory that does not exist, so it fails on the first input) or fails cleanly.
 * Built with -fsanitize=fuzzer when -Dfuzzing=true (clang); otherwise the main() below
 * replays the seed corpus plus deterministic mutations of it, so the target also runs as
 * an ordinary test. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_one_line(const st_error *err) {
  if (!err->msg[0] || strchr(err->msg, '\n'))
    abort(); /* every failure carries exactly one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_recipe *r = NULL;
  st_error err = {0};
  if (st_recipe_load_text(&r, "fuzz.yaml", "/nonexistent/strata-fuzz", (const char *)data,
                          size, &err) < 0) {
    check_one_line(&err);
    return 0;
  }
  st_cell *cells = NULL;
  size_t n = 0;
  if (st_recipe_cells(r, &cells, &n, &err) < 0 || n == 0)
    abort(); /* a loaded recipe has cells */
  for (size_t i = 0; i < n; i++) {
    char *name = st_cell_name(&cells[i]);
    st_cell_filter *flt = NULL;
    if (name && name[0] && st_recipe_cell_filter_parse(r, name, &flt, &err) == 0 &&
        !st_cell_matches(flt, &cells[i]))
      abort(); /* a cell matches its own name */
    st_cell_filter_free(flt);
    free(name);
    st_recipe_instance *ri = NULL;
    st_error ierr = {0};
    if (st_recipe_instantiate(r, &cells[i], &ri, &ierr) == 0) {
      for (size_t l = 0; l < ri->n_layers; l++)
        free(st_recipe_layer_canonical(ri, l));
      st_recipe_instance_free(ri);
    } else {
      check_one_line(&ierr);
    }
  }
  st_cells_free(cells, n);
  st_recipe_free(r);
  return 0;
}

#ifndef STRATA_LIBFUZZER
static uint64_t rng = 0x1234567;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Bytes that matter to YAML and to recipes, so mutations reach past the scanner. */
static const char interesting[] = ":-[]{},\"'&*!#|>$ \n\t/.0123456789";

static void mutate_and_run(const uint8_t *seed, size_t len, int rounds) {
  uint8_t *buf = malloc(len + 64);
  for (int r = 0; r < rounds; r++) {
    size_t n = len;
    memcpy(buf, seed, len);
    int edits = 1 + (int)(next() % 4);
    for (int e = 0; e < edits && n > 0; e++) {
      switch (next() % 5) {
      case 0: buf[next() % n] ^= (uint8_t)(1u << (next() % 8)); break;
      case 1: buf[next() % n] = (uint8_t)next(); break;
      case 2: n = next() % n; break; /* truncate */
      case 3: buf[next() % n] = (uint8_t)interesting[next() % (sizeof interesting - 1)]; break;
      default:
        if (n + 1 < len + 64) {
          size_t at = next() % n;
          memmove(buf + at + 1, buf + at, n - at);
          buf[at] = (uint8_t)interesting[next() % (sizeof interesting - 1)];
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
  int rounds = argc > 2 ? atoi(argv[2]) : 3000;
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
#endif
