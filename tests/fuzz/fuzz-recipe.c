/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the recipe loader (outside input: recipes come from users and over the
 * network). Property: loading never crashes or leaks, errors are one line, and whatever
 * loads yields at least one cell and every cell either instantiates (against a base
 * directory that does not exist, so it fails on the first input) or fails cleanly.
 * Built with -fsanitize=fuzzer when -Dfuzzing=true (clang); otherwise the main() of replay.c
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
