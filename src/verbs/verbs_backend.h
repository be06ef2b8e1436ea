/* The built-in registration backend: ibv_reg_mr (host memory, peermem) or
 * ibv_reg_dmabuf_mr (dmabuf exported by CUDA). */
#ifndef RC_VERBS_BACKEND_H
#define RC_VERBS_BACKEND_H

#include "backend.h"
#include "dmabuf_reg.h"
#include "regcache.h"

/* Choose the method for params (pd or pds, rails, access, method) and, for
 * dmabuf, the mapping type (enum rc_dmabuf_mapping) and where to register
 * data-direct (enum rc_data_direct); fill *backend.
 * *method_used gets REGCACHE_METHOD_DMABUF or _PEERMEM (or _HOST when only
 * host memory can be registered: no GPU method exists and
 * params->host_memory is on).  Returns REGCACHE_OK, INVALID (no pd), UNSUPPORTED (with
 * rc_set_error() saying what to load), NO_MEMORY. */
int rc_verbs_backend_create(const struct regcache_params *params, int mapping, int data_direct,
                            struct rc_backend *backend, int *method_used);

/* Release what rc_verbs_backend_create() allocated. */
void rc_verbs_backend_destroy(struct rc_backend *backend);

#endif
