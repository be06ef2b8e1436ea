#include "verbs_backend.h"

#include "access.h"
#include "cuda_seam.h"
#include "dmabuf_export.h"
#include "dmabuf_reg.h"
#include "last_error.h"
#include "verbs_seam.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct verbs_backend {
    struct ibv_pd *pds[REGCACHE_MAX_RAILS];
    unsigned rails;
    int access;
    /* Bit r: rail r's provider refused IBV_ACCESS_RELAXED_ORDERING once;
     * its registrations leave it out from then on. */
    atomic_uint no_relaxed;
    int method; /* REGCACHE_METHOD_DMABUF, _PEERMEM or _HOST */
    struct rc_dmabuf_reg dmabuf;
};

_Static_assert(RC_IBV_LOCAL_WRITE == IBV_ACCESS_LOCAL_WRITE &&
                   RC_IBV_REMOTE_WRITE == IBV_ACCESS_REMOTE_WRITE &&
                   RC_IBV_REMOTE_READ == IBV_ACCESS_REMOTE_READ &&
                   RC_IBV_REMOTE_ATOMIC == IBV_ACCESS_REMOTE_ATOMIC,
               "access.h has verbs.h's values");

#define PEERMEM_HINT "load nvidia_peermem (modprobe nvidia-peermem)"

/* A provider that fails without setting errno must still read as a
 * failure, so callers zero errno first and fall back to EIO. */
static int failed_errno(void)
{
    return errno ? errno : EIO;
}

static int reg_va(const struct verbs_backend *b, unsigned rail, void *addr, size_t len, int access,
                  struct ibv_mr **mr)
{
    errno = 0;
    *mr = rc_verbs_seam()->reg_mr(b->pds[rail], addr, len, access);
    return *mr ? 0 : failed_errno();
}

static int reg_with(struct verbs_backend *b, uintptr_t addr, size_t len, int device, unsigned rail,
                    int access, struct ibv_mr **mr)
{
    if (device == REGCACHE_DEVICE_HOST || b->method == REGCACHE_METHOD_PEERMEM)
        return reg_va(b, rail, (void *)addr, len, access, mr);
    if (b->method == REGCACHE_METHOD_DMABUF)
        return rc_dmabuf_reg(&b->dmabuf, b->pds[rail], rail, device, access, (void *)addr, len, mr);
    return EOPNOTSUPP; /* host-only backend asked to pin GPU memory */
}

/* Relaxed ordering is a hint to the NIC, not a permission: a provider
 * that refuses the flag (EINVAL from kernels and providers that predate
 * it, EOPNOTSUPP from some) is asked again without it, and not asked for
 * it again on that rail. */
static int verbs_reg(void *arg, uintptr_t addr, size_t len, int device, unsigned rail, int access,
                     void *get_arg, void **handle)
{
    struct verbs_backend *b = arg;
    (void)get_arg; /* for custom backends only */
    struct ibv_mr *mr = NULL;
    bool relaxed = access & IBV_ACCESS_RELAXED_ORDERING;
    if (relaxed && atomic_load_explicit(&b->no_relaxed, memory_order_relaxed) >> rail & 1) {
        access &= ~IBV_ACCESS_RELAXED_ORDERING;
        relaxed = false;
    }
    int err = reg_with(b, addr, len, device, rail, access, &mr);
    if (relaxed && (err == EINVAL || err == EOPNOTSUPP)) {
        err = reg_with(b, addr, len, device, rail, access & ~IBV_ACCESS_RELAXED_ORDERING, &mr);
        if (err == 0)
            atomic_fetch_or_explicit(&b->no_relaxed, 1u << rail, memory_order_relaxed);
    }
    if (err == 0)
        *handle = mr;
    return err;
}

static uint64_t verbs_fds_held(const void *arg)
{
    const struct verbs_backend *b = arg;
    return atomic_load_explicit(&((struct verbs_backend *)b)->dmabuf.fds, memory_order_relaxed);
}

static void verbs_describe(const void *arg, char *buf, size_t n)
{
    const struct verbs_backend *b = arg;
    if (b->method == REGCACHE_METHOD_DMABUF)
        rc_dmabuf_reg_describe(&b->dmabuf, b->rails, buf, n);
    else
        snprintf(buf, n, "%s", b->method == REGCACHE_METHOD_PEERMEM ? "peermem" : "host memory");
}

static void verbs_rail_choice(const void *arg, int device, unsigned rail, uint32_t *mapping,
                              uint32_t *data_direct)
{
    const struct verbs_backend *b = arg;
    if (b->method == REGCACHE_METHOD_DMABUF)
        rc_dmabuf_reg_choice(&b->dmabuf, device, rail, mapping, data_direct);
}

static void verbs_dereg(void *arg, void *handle)
{
    (void)arg;
    /* Fails only for an MR still bound to memory windows, which the
     * cache's user must not create on cached MRs: nothing to undo. */
    (void)rc_verbs_seam()->dereg_mr(handle);
}

/* The method is fixed per cache, so every visible GPU must be able to
 * export. */
static int gpus_export_dmabuf(char *why, size_t n)
{
    const struct rc_cuda_api *cu = rc_cuda_api();
    int count = 0;

    if (!cu) {
        /* rc_cuda_api() has just said why. */
        snprintf(why, n, "no CUDA driver: %s", regcache_last_error());
        return 0;
    }
    if (cu->DeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) {
        snprintf(why, n, "no CUDA device");
        return 0;
    }
    for (int d = 0; d < count; d++) {
        if (!rc_dmabuf_supported(d)) {
            snprintf(why, n, "CUDA device %d cannot export dmabuf", d);
            return 0;
        }
    }
    return 1;
}

/* fd -1 gets past libibverbs into the provider: one that implements dmabuf
 * MRs fails on the fd (EBADF), one that does not fails with EOPNOTSUPP
 * (libibverbs or the provider) or EPROTONOSUPPORT (kernel without the
 * method).  Any other answer cannot be trusted, so it counts as "no". */
static int provider_takes_dmabuf(struct ibv_pd *pd, int access, char *why, size_t n)
{
    const struct rc_verbs_seam *v = rc_verbs_seam();
    char buf[128];
    struct ibv_mr *mr;
    int err;

    errno = 0;
    mr = v->reg_dmabuf_mr(pd, 0, 4096, 0, -1, access);
    err = errno;
    if (mr) {
        /* The provider implements the call and ignored the bad fd. */
        (void)v->dereg_mr(mr);
        return 1;
    }
    if (err == EBADF)
        return 1;
    if (err == EOPNOTSUPP || err == EPROTONOSUPPORT)
        snprintf(why, n, "verbs provider lacks ibv_reg_dmabuf_mr (%s)",
                 strerror_r(err, buf, sizeof(buf)));
    else
        snprintf(why, n,
                 "verbs provider's dmabuf probe failed unexpectedly "
                 "(errno %d: %s)",
                 err, strerror_r(err, buf, sizeof(buf)));
    return 0;
}

/* Every rail's provider must take dmabuf MRs: the method is per cache. */
static int dmabuf_usable(const struct verbs_backend *b, char *why, size_t n)
{
    if (!gpus_export_dmabuf(why, n))
        return 0;
    for (unsigned r = 0; r < b->rails; r++)
        if (!provider_takes_dmabuf(b->pds[r], b->access, why, n))
            return 0;
    return 1;
}

static int select_method(const struct regcache_params *params, const struct verbs_backend *b,
                         int *method)
{
    char why[256];

    switch (params->method) {
    case REGCACHE_METHOD_DMABUF:
        if (!dmabuf_usable(b, why, sizeof(why))) {
            rc_set_error("method DMABUF unavailable: %s", why);
            return REGCACHE_ERR_UNSUPPORTED;
        }
        *method = REGCACHE_METHOD_DMABUF;
        return REGCACHE_OK;
    case REGCACHE_METHOD_PEERMEM:
        if (!rc_verbs_peermem_loaded()) {
            rc_set_error("method PEERMEM unavailable: the nvidia_peermem "
                         "kernel module is not loaded; " PEERMEM_HINT);
            return REGCACHE_ERR_UNSUPPORTED;
        }
        *method = REGCACHE_METHOD_PEERMEM;
        return REGCACHE_OK;
    case REGCACHE_METHOD_AUTO:
        if (dmabuf_usable(b, why, sizeof(why)))
            *method = REGCACHE_METHOD_DMABUF;
        else if (rc_verbs_peermem_loaded())
            *method = REGCACHE_METHOD_PEERMEM;
        else if (params->host_memory)
            *method = REGCACHE_METHOD_HOST;
        else {
            /* The advice first: the message buffer may cut the details. */
            rc_set_error("no GPU registration method: " PEERMEM_HINT " or "
                         "use a GPU driver and verbs provider with dmabuf "
                         "support (dmabuf: %s)",
                         why);
            return REGCACHE_ERR_UNSUPPORTED;
        }
        return REGCACHE_OK;
    case REGCACHE_METHOD_HOST: /* an answer, never a choice */
        break;
    }
    rc_set_error("unknown registration method %d", (int)params->method);
    return REGCACHE_ERR_INVALID;
}

/* The longest registration every rail's device takes (max_mr_size; EFA
 * takes 4 GB, some devices less under an IOMMU), so that the cache never
 * asks for one a NIC must refuse.  A device that does not answer sets no
 * limit: its registrations then fail or not on their own. */
static size_t longest_registration(const struct verbs_backend *b)
{
    uint64_t most = UINT64_MAX;
    for (unsigned r = 0; r < b->rails; r++) {
        uint64_t size;
        if (rc_verbs_seam()->max_mr_size(b->pds[r], &size) == 0 && size && size < most)
            most = size;
    }
    return most >= SIZE_MAX ? 0 : (size_t)most;
}

int rc_verbs_backend_create(const struct regcache_params *params, int mapping, int data_direct,
                            struct rc_backend *backend, int *method_used)
{
    struct verbs_backend *b = calloc(1, sizeof(*b));
    if (!b)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory creating the verbs backend");
    b->rails = (unsigned)params->rails;
    b->access = params->access;
    for (unsigned r = 0; r < b->rails; r++)
        b->pds[r] = params->pds ? params->pds[r] : params->pd;
    for (unsigned r = 0; r < b->rails; r++) {
        if (!b->pds[r]) {
            free(b);
            return rc_fail(REGCACHE_ERR_INVALID, "the built-in verbs backend needs %s",
                           params->pds ? "a pd for every rail in params.pds" : "params.pd");
        }
    }
    int status = select_method(params, b, &b->method);
    if (status == REGCACHE_OK && b->method == REGCACHE_METHOD_DMABUF)
        status = rc_dmabuf_reg_init(&b->dmabuf, b->pds, b->rails, mapping, data_direct);
    if (status != REGCACHE_OK) {
        free(b);
        return status;
    }
    *backend = (struct rc_backend){
        .reg = verbs_reg,
        .dereg = verbs_dereg,
        .fds_held = verbs_fds_held,
        .describe = verbs_describe,
        .rail_choice = verbs_rail_choice,
        .arg = b,
        .max_len = longest_registration(b),
    };
    *method_used = b->method;
    return REGCACHE_OK;
}

void rc_verbs_backend_destroy(struct rc_backend *backend)
{
    free(backend->arg);
    backend->arg = NULL;
}
