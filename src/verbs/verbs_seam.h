/* The verbs seam: every libibverbs and mlx5dv call of the library, and the
 * sysfs root where kernel modules are looked up, so that tests can stand in
 * for an RDMA provider and for the nvidia_peermem module on machines that
 * have neither.  mlx5dv comes from libmlx5.so.1, loaded at run time: the
 * library builds and runs without it. */
#ifndef RC_VERBS_SEAM_H
#define RC_VERBS_SEAM_H

#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct ibv_mr;

/* Same contracts as the libibverbs calls: NULL / non-zero with errno set on
 * failure. */
struct rc_verbs_seam {
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                    int fd, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    /* ibv_query_device on the pd's context: its max_mr_size in *size;
     * 0 or an errno value. */
    int (*max_mr_size)(struct ibv_pd *pd, uint64_t *size);
    /* Whether pd's device is a data-direct one: 1 if so, 0 if not (why
     * says so), -1 when libmlx5 lacks the calls (why says which). */
    int (*data_direct)(struct ibv_pd *pd, char *why, size_t n);
    /* mlx5dv_reg_dmabuf_mr(..., MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT), as
     * reg_dmabuf_mr; NULL with errno EOPNOTSUPP without libmlx5. */
    struct ibv_mr *(*reg_dmabuf_mr_data_direct)(struct ibv_pd *pd, uint64_t offset, size_t len,
                                                uint64_t iova, int fd, int access);
};

/* The table in use: libibverbs unless a test replaced it.  Thread safe. */
const struct rc_verbs_seam *rc_verbs_seam(void);

/* Tests: use `seam` instead of libibverbs; NULL goes back to libibverbs.
 * The table must outlive its use. */
void rc_verbs_seam_override(const struct rc_verbs_seam *seam);

/* 1 if a kernel module that lets ibv_reg_mr pin GPU memory is loaded:
 * nvidia_peermem (driver 470 and later) or its predecessor nv_peer_mem. */
int rc_verbs_peermem_loaded(void);

/* Tests: look for modules under `root`/module/ instead of /sys/module/;
 * NULL goes back to /sys.  The string must outlive its use. */
void rc_verbs_sysfs_root_override(const char *root);

#endif
