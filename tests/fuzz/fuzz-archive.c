/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for archive and Debian package sources (outside input: any
 * file a recipe names). Each input is written to a temp file and read both
 * as an archive and as a .deb into a layer writer over a memory store.
 * Properties: nothing crashes or leaks, and a source that succeeds has fed
 * the hasher exactly the input's bytes (its digest is the input's SHA-256).
 * Built with -fsanitize=fuzzer when -Dfuzzing=true (clang); otherwise the
 * main() below replays the seed corpus plus deterministic mutations of it,
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

#ifndef STRATA_LIBFUZZER
static uint64_t rng = 0x1234567;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

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
      case 2: n = next() % n; break; /* truncate */
      default:
        if (n + 1 < len + 64) {
          size_t at = next() % n;
          memmove(buf + at + 1, buf + at, n - at);
          buf[at] = (uint8_t)next();
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
  int rounds = argc > 2 ? atoi(argv[2]) : 500;
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
