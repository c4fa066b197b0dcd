/* SPDX-License-Identifier: Apache-2.0 */
/* The services `strata serve` registers (the table is in server.c). A new
 * service adds its register function here and to that table (rpc.h). */
#pragma once

#include "rpc.h"

int st_svc_capabilities_register(st_server *srv, st_error *err);
int st_svc_cas_register(st_server *srv, st_error *err);
int st_svc_images_register(st_server *srv, st_error *err);
int st_svc_status_register(st_server *srv, st_error *err);
int st_svc_builds_register(st_server *srv, st_error *err);
