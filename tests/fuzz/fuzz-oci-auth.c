/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for what a registry and its token server send back: the
 * WWW-Authenticate challenge, the scopes it names and the token JSON.
 * Property: parsing never crashes or leaks; a parsed challenge has NUL-
 * terminated fields within their size, and scopes that were added are
 * covered by the set afterwards. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "registry-auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_oci_challenge c;
  if (st_oci_challenge_parse(&c, (const char *)data, size, NULL) == ST_OK) {
    if (strnlen(c.realm, sizeof c.realm) == sizeof c.realm ||
        strnlen(c.scope, sizeof c.scope) == sizeof c.scope)
      abort();
    st_oci_scopes set = {0};
    if (st_oci_scopes_add(&set, c.scope, NULL, NULL) == ST_OK && !st_oci_scopes_cover(&set, c.scope))
      abort(); /* what was added must be covered */
  }
  char *tok = NULL;
  long exp = 0;
  if (st_oci_token_parse(&tok, &exp, (const char *)data, size, NULL) == ST_OK) {
    if (!tok[0] || exp <= 0)
      abort();
    free(tok);
  }
  return 0;
}
