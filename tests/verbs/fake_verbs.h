/* A stand-in RDMA provider behind the verbs seam, and a stand-in sysfs for
 * the peermem module check.  It records every call and fails on request. */
#ifndef FAKE_VERBS_H
#define FAKE_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "fake_driver.h"

struct ibv_pd;

struct fake_dmabuf_call {
    struct ibv_pd *pd;
    uint64_t offset, iova;
    size_t len;
    int fd, fd_was_open, access;
    int data_direct; /* through mlx5dv_reg_dmabuf_mr, DATA_DIRECT */
};

struct fake_verbs {
    /* What the fake answers. */
    int probe_errno;     /* reg_dmabuf_mr with fd -1 fails with this;
                            0 = it returns an MR */
    int reg_mr_failures; /* the next N reg_mr calls fail ... */
    int reg_mr_errno;    /* ... with this errno (0: errno left at 0) */
    int dmabuf_failures; /* same for reg_dmabuf_mr with a real fd */
    int dmabuf_errno;
    /* An old provider: reg_mr and reg_dmabuf_mr fail with EINVAL when
     * asked for IBV_ACCESS_RELAXED_ORDERING (on refuse_relaxed_pd, or on
     * every pd when that is NULL). */
    int refuse_relaxed;
    struct ibv_pd *refuse_relaxed_pd;
    /* Each dmabuf MR keeps a duplicate of the fd until deregistered: the
     * dmabuf file that a real MR pins, counted against RLIMIT_NOFILE. */
    int mr_keeps_fd;
    /* The device's max_mr_size (ibv_query_device): for max_mr_pd, or for
     * every pd when that is NULL; the others take anything. */
    uint64_t max_mr_size;
    struct ibv_pd *max_mr_pd;
    /* libmlx5 with mlx5dv_reg_dmabuf_mr and the data-direct query (else
     * both are missing), and the pd whose device is a data-direct one. */
    int mlx5;
    struct ibv_pd *data_direct_pd;
    /* Called inside every reg_dmabuf_mr with a real fd, before it answers. */
    void (*during_dmabuf)(void *arg);
    void *during_dmabuf_arg;

    /* What it saw. */
    int reg_mr_calls, dmabuf_calls, probe_calls, dereg_calls, live_mrs;
    struct {
        struct ibv_pd *pd;
        void *addr;
        size_t len;
        int access;
    } last_reg_mr;
    struct fake_dmabuf_call last_dmabuf, last_probe;
};

extern struct fake_verbs fake_verbs;

/* Reset the record and route the library's verbs calls to the fake. */
void fake_verbs_install(void);
void fake_verbs_uninstall(void);

/* Make the library see (or not see) kernel module `name` ("nvidia_peermem",
 * "nv_peer_mem"); NULL = no module.  Uses a private temporary sysfs. */
void fake_sysfs_module(const char *name);
void fake_sysfs_remove(void);

/* A protection domain the fake accepts; never dereferenced. */
struct ibv_pd *fake_pd(void);

/* The usual world of a verbs test, as cmocka setup and teardown: fake
 * verbs, the fake CUDA driver (fake_driver.h) with one GPU that exports
 * dmabuf and one allocation on it, FAKE_GPU_SIZE bytes at fake_gpu(0), no
 * nvidia_peermem module.  The teardown fails the test if an MR was left
 * registered. */
#define FAKE_GPU_SIZE ((size_t)8 << 20)
#define fake_gpu(offset) ((char *)drv_addr(offset))
int fake_world_setup(void **state);
int fake_world_teardown(void **state);

#endif
