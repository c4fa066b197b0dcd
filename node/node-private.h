/* SPDX-License-Identifier: Apache-2.0 */
/* The node handle, shared by node.c (no OSTree) and node-repo.c. */
#pragma once

#include "node.h"

struct st_node {
  char *dir;
  st_store *cache;
  st_ostree *repo;                   /* opened on demand by st_node_repo */
  void (*repo_free)(st_ostree *);    /* set with repo */
  int lock_fd;
};
