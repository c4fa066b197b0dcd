/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the OCI JSON parsers (outside input: index.json,
 * manifests and configs of image layouts and registries, docker archives'
 * manifest.json). Property: parsing
 * never crashes or leaks, and an index that parses can be extended by the
 * index writer into JSON that parses again with one more manifest. Built
 * with -fsanitize=fuzzer when -Dfuzzing=true (clang); otherwise replay.c's
 * main() replays the seed corpus with deterministic mutations. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oci.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_oci_manifest *m = NULL;
  st_oci_config *c = NULL;
  st_oci_index *x = NULL;
  st_docker_manifest *dm = NULL;
  if (st_docker_manifest_parse(&dm, data, size, NULL) == ST_OK) {
    for (size_t i = 0; i < dm->n; i++)
      if (!dm->images[i].config || !dm->images[i].layers)
        abort(); /* a parsed image always names its config and layers */
    st_docker_manifest_free(dm);
  }
  if (st_oci_manifest_parse(&m, data, size, NULL) == ST_OK)
    st_oci_manifest_free(m);
  if (st_oci_config_parse(&c, data, size, NULL) == ST_OK)
    st_oci_config_free(c);
  if (st_oci_index_parse(&x, data, size, NULL) < 0)
    return 0;
  st_oci_desc d = {.media_type = (char *)ST_OCI_MT_MANIFEST, .size = 1,
                   .ref_name = (char *)"fuzz"};
  char *out = NULL;
  size_t len = 0;
  st_oci_index *again = NULL;
  if (st_oci_index_json(data, size, &d, &out, &len, NULL) < 0 ||
      st_oci_index_parse(&again, (const uint8_t *)out, len, NULL) < 0)
    abort(); /* a valid index must stay valid when a manifest is added */
  size_t kept = 0;
  for (size_t i = 0; i < x->n; i++)
    kept += !x->manifests[i].ref_name || strcmp(x->manifests[i].ref_name, "fuzz");
  if (again->n != kept + 1)
    abort();
  free(out);
  st_oci_index_free(again);
  st_oci_index_free(x);
  return 0;
}
