/* What every VM test needs: the first RDMA device (or a skip), a cache on
 * it for host memory, page-aligned buffers, and the provider's own count of
 * this process's memory regions. */
#ifndef VM_ENV_H
#define VM_ENV_H

#include "loopback.h"

#include <regcache.h>

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#define VM_ACCESS_ALL \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct vm_dev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
};

/* Open the first RDMA device and a PD on it, or print why not and exit 77:
 * these tests only mean something against a real provider (run them through
 * run_vm_tests.sh). */
void vm_dev_open(struct vm_dev *d);
void vm_dev_close(struct vm_dev *d);

/* A cache on pd for host memory with the given access flags and registration
 * alignment (0 = the default); fails the test if creation fails. */
regcache_t *vm_cache(struct ibv_pd *pd, int access, size_t alignment);

/* len bytes of fresh, page-aligned anonymous memory (mmap), and its
 * release.  Fails the test if mmap fails. */
void *vm_pages(size_t len);
void vm_pages_free(void *p, size_t len);

/* The number of memory regions on the device, as the provider reports them
 * (`rdma resource show mr`: the kernel's resource tracker, not the library's
 * bookkeeping).  Not filtered by pid: the tracker records the thread that
 * registered, and in the VM the test is the device's only user anyway.
 * Fails the test if the tool fails. */
int vm_provider_mrs(void);

/* One RDMA READ or WRITE of len bytes on lb's side 0: local memory under
 * lkey, remote memory (side 1) under rkey.  Returns the completion status
 * (IBV_WC_SUCCESS, IBV_WC_REM_ACCESS_ERR, ...) or -1. */
int vm_rdma(struct loopback *lb, enum ibv_wr_opcode op, void *local,
            uint32_t lkey, void *remote, uint32_t rkey, size_t len);

/* The cache's counters; fails the test if they cannot be read. */
struct regcache_stats vm_stats(const regcache_t *cache);

#endif
