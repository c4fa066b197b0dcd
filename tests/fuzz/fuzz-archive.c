/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for archive and Debian package sources (outside input: any
 * file a recipe names). Each input is written to a temp file and read both
 * as an archive and as a .deb into a layer writer over a memory store.
 * Properties: nothing crashes or leaks, and a source that succeeds has fed
 * the hasher exactly the input's bytes (its digest is the input's SHA-256).
 * Built with -fsanitize=fuzzer when -Dfuzzing=true (clang); otherwise the
 * main() of replay.c replays the seed corpus plus deterministic mutations of it,
 * so the target also runs as an ordinary test. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char input_path[4096];
static int input_fd = -1;

static void remove_input(void) {
  if (input_fd >= 0)
    unlink(input_path);
}

/* Replaces the temp file's content with data. */
static void write_input(const uint8_t *data, size_t size) {
  if (input_fd < 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(input_path, sizeof input_path, "%s/strata-fuzz-archive-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    input_fd = mkstemp(input_path);
    if (input_fd < 0)
      abort();
    atexit(remove_input);
  }
  if (ftruncate(input_fd, 0) < 0 || lseek(input_fd, 0, SEEK_SET) < 0 ||
      st_write_all(input_fd, data, size) < 0)
    abort();
}

static void run(const uint8_t *data, size_t size, int deb) {
  st_backend *b = NULL;
  st_store *s = NULL;
  st_layer_writer *w = NULL;
  st_store_config cfg = st_store_config_default();
  if (st_backend_mem_new(&b, NULL) < 0 || st_store_init_backend(b, &cfg, NULL) < 0 ||
      st_store_open_backend(&s, b, NULL) < 0 || st_layer_writer_new(&w, s, 0, NULL) < 0)
    abort();
  st_hasher *h = st_hasher_new();
  if (!h)
    abort();
  st_source_opts o = {.dest = "/x", .strip = size % 2, .hasher = h};
  char *control = NULL;
  int rc = deb ? st_source_deb(w, input_path, &o, &control, NULL)
               : st_source_archive(w, input_path, &o, NULL);
  if (rc == 0) {
    st_digest got, want;
    st_hasher_final(h, &got);
    st_sha256(&want, data, size);
    if (!st_digest_equal(&got, &want))
      abort(); /* the input digest must cover exactly the input */
    if (deb && (!control || !*control || control[strlen(control) - 1] != '\n'))
      abort();
    st_layer_writer_finish(w, &got, NULL, NULL);
  }
  free(control);
  st_hasher_free(h);
  st_layer_writer_free(w);
  st_store_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_log_set_level(ST_LOG_ERROR); /* skipped device nodes are expected */
  write_input(data, size);
  run(data, size, 0);
  run(data, size, 1);
  return 0;
}
