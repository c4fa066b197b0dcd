/* SPDX-License-Identifier: Apache-2.0 */
/* The node's OSTree repo, opened on first use. */
#include <stdio.h>

#include "node-private.h"
#include "ostree-repo.h"

int st_node_repo(st_node *n, st_ostree **out, st_error *err) {
  if (!n->repo) {
    char path[4096];
    snprintf(path, sizeof path, "%s/repo", n->dir);
    int rc = st_ostree_open(&n->repo, path, err);
    if (rc < 0)
      return rc;
    n->repo_free = st_ostree_free;
  }
  *out = n->repo;
  return ST_OK;
}
