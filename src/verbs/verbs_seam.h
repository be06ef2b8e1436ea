/* The verbs seam: every libibverbs call of the library, and the sysfs root
 * where kernel modules are looked up, so that tests can stand in for an RDMA
 * provider and for the nvidia_peermem module on machines that have neither. */
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
