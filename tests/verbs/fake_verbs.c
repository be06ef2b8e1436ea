#include "fake_verbs.h"
#include "fake_driver.h"

#include "verbs_seam.h"

#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

struct fake_verbs fake_verbs;

/* The fd an MR keeps (mr_keeps_fd) lives in its handle field, which the
 * library never reads. */
static struct ibv_mr *new_mr(struct ibv_pd *pd, uint64_t addr, size_t len, int fd)
{
    static uint32_t next_key = 1;
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    int kept = -1;

    if (!mr) {
        errno = ENOMEM;
        return NULL;
    }
    if (fd >= 0 && fake_verbs.mr_keeps_fd) {
        kept = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (kept < 0) {
            free(mr);
            return NULL; /* errno EMFILE, as the kernel would say */
        }
    }
    mr->handle = (uint32_t)kept;
    mr->pd = pd;
    mr->addr = (void *)(uintptr_t)addr;
    mr->length = len;
    mr->lkey = mr->rkey = next_key++;
    fake_verbs.live_mrs++;
    return mr;
}

/* Fail the call if a failure is still queued. */
static int take_failure(int *failures, int err)
{
    if (*failures <= 0)
        return 0;
    (*failures)--;
    errno = err;
    return 1;
}

/* An old provider's answer to a flag it does not know; and every verbs
 * device's to remote write or atomic access without local write, which the
 * kernel refuses (ib_check_mr_access). */
static int refuses(struct ibv_pd *pd, int access)
{
    if (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return 1;
    }
    if (!fake_verbs.refuse_relaxed || !(access & IBV_ACCESS_RELAXED_ORDERING) ||
        (fake_verbs.refuse_relaxed_pd && pd != fake_verbs.refuse_relaxed_pd))
        return 0;
    errno = EINVAL;
    return 1;
}

static struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    fake_verbs.reg_mr_calls++;
    fake_verbs.last_reg_mr.pd = pd;
    fake_verbs.last_reg_mr.addr = addr;
    fake_verbs.last_reg_mr.len = len;
    fake_verbs.last_reg_mr.access = access;
    if (take_failure(&fake_verbs.reg_mr_failures, fake_verbs.reg_mr_errno))
        return NULL;
    if (refuses(pd, access))
        return NULL;
    return new_mr(pd, (uintptr_t)addr, len, -1);
}

static struct ibv_mr *dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                int fd, int access, int data_direct)
{
    int probe = fd == -1;
    struct fake_dmabuf_call *rec = probe ? &fake_verbs.last_probe : &fake_verbs.last_dmabuf;

    if (probe)
        fake_verbs.probe_calls++;
    else
        fake_verbs.dmabuf_calls++;
    rec->pd = pd;
    rec->offset = offset;
    rec->len = len;
    rec->iova = iova;
    rec->fd = fd;
    rec->fd_was_open = fd >= 0 && fcntl(fd, F_GETFD) != -1;
    rec->access = access;
    rec->data_direct = data_direct;
    if (probe) {
        errno = fake_verbs.probe_errno;
        return fake_verbs.probe_errno ? NULL : new_mr(pd, iova, len, -1);
    }
    if (fake_verbs.during_dmabuf)
        fake_verbs.during_dmabuf(fake_verbs.during_dmabuf_arg);
    if (take_failure(&fake_verbs.dmabuf_failures, fake_verbs.dmabuf_errno) || refuses(pd, access))
        return NULL;
    return new_mr(pd, iova, len, fd);
}

static struct ibv_mr *fake_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len,
                                         uint64_t iova, int fd, int access)
{
    return dmabuf_mr(pd, offset, len, iova, fd, access, 0);
}

static struct ibv_mr *fake_reg_dmabuf_mr_data_direct(struct ibv_pd *pd, uint64_t offset, size_t len,
                                                     uint64_t iova, int fd, int access)
{
    if (!fake_verbs.mlx5) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return dmabuf_mr(pd, offset, len, iova, fd, access, 1);
}

static int fake_data_direct(struct ibv_pd *pd, char *why, size_t n)
{
    if (!fake_verbs.mlx5) {
        snprintf(why, n, "libmlx5.so.1 cannot be loaded");
        return -1;
    }
    if (pd != fake_verbs.data_direct_pd) {
        snprintf(why, n, "not a data-direct device");
        return 0;
    }
    return 1;
}

static int fake_dereg_mr(struct ibv_mr *mr)
{
    fake_verbs.dereg_calls++;
    fake_verbs.live_mrs--;
    if ((int)mr->handle >= 0)
        close((int)mr->handle);
    free(mr);
    return 0;
}

static int fake_max_mr_size(struct ibv_pd *pd, uint64_t *size)
{
    *size =
        !fake_verbs.max_mr_pd || pd == fake_verbs.max_mr_pd ? fake_verbs.max_mr_size : UINT64_MAX;
    return 0;
}

static const struct rc_verbs_seam fake_seam = {
    .reg_mr = fake_reg_mr,
    .reg_dmabuf_mr = fake_reg_dmabuf_mr,
    .dereg_mr = fake_dereg_mr,
    .max_mr_size = fake_max_mr_size,
    .data_direct = fake_data_direct,
    .reg_dmabuf_mr_data_direct = fake_reg_dmabuf_mr_data_direct,
};

void fake_verbs_install(void)
{
    memset(&fake_verbs, 0, sizeof(fake_verbs));
    fake_verbs.probe_errno = EBADF;
    fake_verbs.max_mr_size = UINT64_MAX;
    rc_verbs_seam_override(&fake_seam);
}

void fake_verbs_uninstall(void)
{
    rc_verbs_seam_override(NULL);
}

static char sysfs_root[64];
static char module_dir[PATH_MAX];

void fake_sysfs_remove(void)
{
    char path[PATH_MAX];

    rc_verbs_sysfs_root_override(NULL);
    if (!sysfs_root[0])
        return;
    if (module_dir[0])
        rmdir(module_dir);
    snprintf(path, sizeof(path), "%s/module", sysfs_root);
    rmdir(path);
    rmdir(sysfs_root);
    sysfs_root[0] = module_dir[0] = '\0';
}

void fake_sysfs_module(const char *name)
{
    char path[PATH_MAX];

    fake_sysfs_remove();
    strcpy(sysfs_root, "/tmp/regcache-sysfs-XXXXXX");
    if (!mkdtemp(sysfs_root)) {
        perror("mkdtemp");
        abort();
    }
    snprintf(path, sizeof(path), "%s/module", sysfs_root);
    if (mkdir(path, 0700) != 0) {
        perror("mkdir");
        abort();
    }
    if (name) {
        snprintf(module_dir, sizeof(module_dir), "%s/module/%s", sysfs_root, name);
        if (mkdir(module_dir, 0700) != 0) {
            perror("mkdir");
            abort();
        }
    }
    rc_verbs_sysfs_root_override(sysfs_root);
}

struct ibv_pd *fake_pd(void)
{
    static struct ibv_pd pd;
    return &pd;
}

int fake_world_setup(void **state)
{
    (void)state;
    fake_verbs_install();
    drv_install();
    drv_legacy(0, FAKE_GPU_SIZE);
    fake_sysfs_module(NULL);
    return 0;
}

int fake_world_teardown(void **state)
{
    (void)state;
    assert_int_equal(fake_verbs.live_mrs, 0);
    fake_sysfs_remove();
    drv_uninstall();
    fake_verbs_uninstall();
    return 0;
}
