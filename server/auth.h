/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer tokens, hashed at rest. A tokens file has one line per token:
 *   NAME ROLE SHA256-HEX-OF-TOKEN
 * ('#' starts a comment). Tokens are "st_" + 64 random hex digits; only their
 * SHA-256 is stored, so the file does not reveal them. */
#pragma once

#include "rpc.h"

typedef struct st_tokens st_tokens;

/* Reads and checks the file: ST_EFORMAT naming file and line. */
int st_tokens_load(st_tokens **out, const char *path, st_error *err);
void st_tokens_free(st_tokens *t);
/* The role and name of a presented token (constant-time compare of the
 * hashes); ST_EAUTH when unknown. *name_out points into t. */
int st_tokens_check(const st_tokens *t, const char *token, st_role *role_out,
                    const char **name_out, st_error *err);
/* Creates a new random token for NAME with ROLE, appends its hash to the
 * file (created with mode 0600 if missing) and returns the token (malloc'd)
 * to show once. ST_EEXIST if NAME is already in the file. */
int st_tokens_add(const char *path, const char *name, st_role role, char **token_out,
                  st_error *err);
