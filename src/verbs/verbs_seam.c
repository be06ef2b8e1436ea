#include "verbs_seam.h"

#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
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

/* rdma-core's mlx5dv API (v53 and later), declared here: older headers,
 * Debian 12's among them, lack it. */
#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (1 << 0)
typedef struct ibv_mr *(*mlx5_reg_dmabuf_fn)(struct ibv_pd *pd, uint64_t offset, size_t length,
                                             uint64_t iova, int fd, int access, int mlx5_access);
typedef int (*mlx5_dd_path_fn)(struct ibv_context *context, char *buf, size_t buf_len);

static struct {
    mlx5_reg_dmabuf_fn reg_dmabuf;
    mlx5_dd_path_fn dd_path;
    char missing[128];
} mlx5;
static pthread_once_t mlx5_once = PTHREAD_ONCE_INIT;

static void load_mlx5(void)
{
    /* Never closed: the calls stay in use until the process exits. */
    void *lib = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(mlx5.missing, sizeof mlx5.missing, "libmlx5.so.1 cannot be loaded");
        return;
    }
    void *reg = dlsym(lib, "mlx5dv_reg_dmabuf_mr");
    void *path = dlsym(lib, "mlx5dv_get_data_direct_sysfs_path");
    if (!reg || !path) {
        snprintf(mlx5.missing, sizeof mlx5.missing, "libmlx5.so.1 has no %s (rdma-core before v53)",
                 !reg ? "mlx5dv_reg_dmabuf_mr" : "mlx5dv_get_data_direct_sysfs_path");
        return;
    }
    /* memcpy: object pointers to function pointers. */
    memcpy(&mlx5.reg_dmabuf, &reg, sizeof reg);
    memcpy(&mlx5.dd_path, &path, sizeof path);
}

static int real_data_direct(struct ibv_pd *pd, char *why, size_t n)
{
    pthread_once(&mlx5_once, load_mlx5);
    if (!mlx5.dd_path) {
        snprintf(why, n, "%s", mlx5.missing);
        return -1;
    }
    char path[PATH_MAX];
    int err = mlx5.dd_path(pd->context, path, sizeof path);
    if (err)
        snprintf(why, n, "%s is not a data-direct device (%s)",
                 ibv_get_device_name(pd->context->device), strerror(err));
    return err == 0;
}

static struct ibv_mr *real_reg_dmabuf_mr_data_direct(struct ibv_pd *pd, uint64_t offset, size_t len,
                                                     uint64_t iova, int fd, int access)
{
    pthread_once(&mlx5_once, load_mlx5);
    if (!mlx5.reg_dmabuf) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return mlx5.reg_dmabuf(pd, offset, len, iova, fd, access, MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT);
}

static const struct rc_verbs_seam real_seam = {
    .reg_mr = real_reg_mr,
    .reg_dmabuf_mr = ibv_reg_dmabuf_mr,
    .dereg_mr = ibv_dereg_mr,
    .max_mr_size = real_max_mr_size,
    .data_direct = real_data_direct,
    .reg_dmabuf_mr_data_direct = real_reg_dmabuf_mr_data_direct,
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
