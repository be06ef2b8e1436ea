/* What every VM test needs: an RDMA device (or a skip), a cache on it for
 * host memory, page-aligned buffers, the provider's own count of memory
 * regions, and RDMA transfers checked byte for byte. */
#ifndef VM_ENV_H
#define VM_ENV_H

#include <stdbool.h>

#include "loopback.h"

#include <regcache.h>

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#define VM_ACCESS_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct vm_dev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
};

/* Open the first RDMA device and a PD on it, or print why not and exit 77:
 * these tests only mean something against a real provider (run them through
 * run_vm_tests.sh). */
void vm_dev_open(struct vm_dev *d);
/* The same for the device called name ("rxe1"): tests of several rails pick
 * their devices by name, not by the order the provider lists them in. */
void vm_dev_open_named(struct vm_dev *d, const char *name);
void vm_dev_close(struct vm_dev *d);

/* Parameters of a cache for host memory with the given access flags and
 * registration alignment (0 = the default), and no pd yet. */
void vm_params_init(struct regcache_params *p, int access, size_t alignment);
/* regcache_create(p); fails the test, with the library's reason, if
 * creation fails. */
regcache_t *vm_cache_create(const struct regcache_params *p);
/* A cache on pd for host memory (vm_params_init, vm_cache_create). */
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
/* The same, counting only the device called name ("rxe0"). */
int vm_provider_mrs_on(const char *name);

/* One RDMA READ or WRITE of len bytes on lb's side 0: local memory under
 * lkey, remote memory (side 1) under rkey.  Returns the completion status
 * (IBV_WC_SUCCESS, IBV_WC_REM_ACCESS_ERR, ...) or -1. */
int vm_rdma(struct loopback *lb, enum ibv_wr_opcode op, void *local, uint32_t lkey, void *remote,
            uint32_t rkey, size_t len);

/* The entry's keys on the rail it was got on. */
uint32_t vm_lkey(const regcache_entry_t *e);
uint32_t vm_rkey(const regcache_entry_t *e);

/* len bytes of a pattern that differs with seed. */
void vm_fill(void *p, size_t len, int seed);

/* RDMA WRITE src -> dst of len bytes on lb (src under lkey, dst under
 * rkey), then READ dst -> src of other bytes, each checked byte for byte:
 * data moved both ways through the keys.  seed picks the patterns, so that
 * a round cannot pass on the bytes an earlier one left. */
void vm_write_read(struct loopback *lb, void *src, uint32_t lkey, void *dst, uint32_t rkey,
                   size_t len, int seed);

/* An RDMA WRITE src -> dst with rkey is refused by the responder
 * (IBV_WC_REM_ACCESS_ERR) and dst keeps every byte.  The refusal moves lb's
 * QPs to the error state: call it last on a pair. */
void vm_write_refused(struct loopback *lb, void *src, uint32_t lkey, void *dst, uint32_t rkey,
                      size_t len);

/* The cache's counters; fails the test if they cannot be read. */
struct regcache_stats vm_stats(const regcache_t *cache);

/* The host memory monitor's tests' run: a cache on pd (vm_cache, every
 * access), a loopback pair, and len bytes of source pages held
 * registered.  Fails the test if any of it cannot be had. */
struct vm_run {
    regcache_t *cache;
    struct loopback lb;
    char *src;
    size_t len;
    regcache_entry_t *src_entry;
};
struct vm_run *vm_run_open(struct ibv_pd *pd, size_t alignment, size_t len);
void vm_run_close(struct vm_run *r);
/* A get of [dst, dst + len) (len at most the run's) and an RDMA WRITE of a
 * fresh pattern into it through the entry's rkey: whether the pattern is
 * what dst's pages then hold.  Fails the test if the get or the WRITE
 * fails. */
bool vm_write_arrives(struct vm_run *r, char *dst, size_t len, int seed);

#endif
