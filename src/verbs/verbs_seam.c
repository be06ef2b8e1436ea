#include "verbs_seam.h"

#include <infiniband/verbs.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

/* ibv_reg_mr is a macro around an inline function in recent verbs.h, so the
 * table needs a real function to point at. */
static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return ibv_reg_mr(pd, addr, len, access);
}

static int real_max_mr_size(struct ibv_pd *pd, uint64_t *size)
{
    struct ibv_device_attr attr;
    int err = ibv_query_device(pd->context, &attr);
    if (!err)
        *size = attr.max_mr_size;
    return err;
}

static const struct rc_verbs_seam real_seam = {
    .reg_mr = real_reg_mr,
    .reg_dmabuf_mr = ibv_reg_dmabuf_mr,
    .dereg_mr = ibv_dereg_mr,
    .max_mr_size = real_max_mr_size,
};

/* Atomic only so that a test swapping tables is not a data race; the
 * library itself never writes these. */
static _Atomic(const struct rc_verbs_seam *) seam_override;
static _Atomic(const char *) sysfs_root_override;

const struct rc_verbs_seam *rc_verbs_seam(void)
{
    const struct rc_verbs_seam *s = atomic_load_explicit(&seam_override, memory_order_acquire);
    return s ? s : &real_seam;
}

void rc_verbs_seam_override(const struct rc_verbs_seam *seam)
{
    atomic_store_explicit(&seam_override, seam, memory_order_release);
}

void rc_verbs_sysfs_root_override(const char *root)
{
    atomic_store_explicit(&sysfs_root_override, root, memory_order_release);
}

static int module_loaded(const char *root, const char *name)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/module/%s", root, name);
    return n > 0 && (size_t)n < sizeof(path) && access(path, F_OK) == 0;
}

int rc_verbs_peermem_loaded(void)
{
    const char *root = atomic_load_explicit(&sysfs_root_override, memory_order_acquire);
    if (!root)
        root = "/sys";
    return module_loaded(root, "nvidia_peermem") || module_loaded(root, "nv_peer_mem");
}
