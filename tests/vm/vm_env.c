#include "vm_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

/* Skip without a device (why says what is missing), else a PD on it. */
static void dev_init(struct vm_dev *d, struct ibv_context *ctx, const char *why)
{
    d->ctx = ctx;
    if (!d->ctx) {
        printf("SKIP: %s; this test runs inside the soft-RoCE VM, which "
               "`ctest -L vm` boots (tests/vm/run_vm_tests.sh)\n",
               why);
        exit(77);
    }
    d->pd = ibv_alloc_pd(d->ctx);
    if (!d->pd) {
        printf("FAIL: ibv_alloc_pd on %s\n", ibv_get_device_name(d->ctx->device));
        exit(1);
    }
}

void vm_dev_open(struct vm_dev *d)
{
    const char *why = NULL;
    struct ibv_context *ctx = loopback_open_first(&why);
    dev_init(d, ctx, why);
}

void vm_dev_open_named(struct vm_dev *d, const char *name)
{
    static char why[128];
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = NULL;
    int found = 0;
    for (int i = 0; list && list[i] && !found; i++) {
        found = strcmp(ibv_get_device_name(list[i]), name) == 0;
        if (found)
            ctx = ibv_open_device(list[i]);
    }
    snprintf(why, sizeof(why), found ? "ibv_open_device failed on %s" : "no RDMA device named %s",
             name);
    if (list)
        ibv_free_device_list(list);
    dev_init(d, ctx, why);
}

void vm_dev_close(struct vm_dev *d)
{
    ibv_dealloc_pd(d->pd);
    ibv_close_device(d->ctx);
}

void vm_params_init(struct regcache_params *p, int access, size_t alignment)
{
    assert_int_equal(regcache_params_init(p), REGCACHE_OK);
    p->access = access;
    p->host_memory = 1;
    if (alignment)
        p->alignment = alignment;
}

regcache_t *vm_cache_create(const struct regcache_params *p)
{
    regcache_t *cache = NULL;
    int rc = regcache_create(p, &cache);
    if (rc != REGCACHE_OK)
        print_error("regcache_create: %s (%s)\n", regcache_strerror(rc), regcache_last_error());
    assert_int_equal(rc, REGCACHE_OK);
    assert_non_null(cache);
    return cache;
}

regcache_t *vm_cache(struct ibv_pd *pd, int access, size_t alignment)
{
    struct regcache_params p;
    vm_params_init(&p, access, alignment);
    p.pd = pd;
    return vm_cache_create(&p);
}

void *vm_pages(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

void vm_pages_free(void *p, size_t len)
{
    assert_int_equal(munmap(p, len), 0);
}

int vm_provider_mrs_on(const char *name)
{
    const char *cmd = "rdma resource show mr";
    char line[512], want[64];
    int n = 0;
    /* Each MR is a line "dev NAME mrn ...". */
    if (name)
        snprintf(want, sizeof(want), "dev %s ", name);
    else
        snprintf(want, sizeof(want), "dev ");
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f))
        n += strncmp(line, want, strlen(want)) == 0;
    int status = pclose(f);
    if (status != 0)
        print_error("`%s` exited with status %d\n", cmd, status);
    assert_int_equal(status, 0);
    return n;
}

int vm_provider_mrs(void)
{
    return vm_provider_mrs_on(NULL);
}

int vm_rdma(struct loopback *lb, enum ibv_wr_opcode op, void *local, uint32_t lkey, void *remote,
            uint32_t rkey, size_t len)
{
    struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey };
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op,
        .wr.rdma = { .remote_addr = (uintptr_t)remote, .rkey = rkey },
    };
    return loopback_send_wait(lb, 0, &wr);
}

uint32_t vm_lkey(const regcache_entry_t *e)
{
    return regcache_entry_mr(e)->lkey;
}

uint32_t vm_rkey(const regcache_entry_t *e)
{
    return regcache_entry_mr(e)->rkey;
}

void vm_fill(void *p, size_t len, int seed)
{
    char *c = p;
    for (size_t i = 0; i < len; i++)
        c[i] = (char)(i * 31 + (size_t)seed);
}

void vm_write_read(struct loopback *lb, void *src, uint32_t lkey, void *dst, uint32_t rkey,
                   size_t len, int seed)
{
    vm_fill(src, len, seed);
    memset(dst, 0, len);
    assert_int_equal(vm_rdma(lb, IBV_WR_RDMA_WRITE, src, lkey, dst, rkey, len), IBV_WC_SUCCESS);
    assert_memory_equal(dst, src, len);

    vm_fill(dst, len, seed + 100);
    assert_int_equal(vm_rdma(lb, IBV_WR_RDMA_READ, src, lkey, dst, rkey, len), IBV_WC_SUCCESS);
    assert_memory_equal(src, dst, len);
}

void vm_write_refused(struct loopback *lb, void *src, uint32_t lkey, void *dst, uint32_t rkey,
                      size_t len)
{
    char *before = malloc(len);
    assert_non_null(before);
    memcpy(before, dst, len);
    /* Every source byte differs from its target, so that a write that got
     * through anywhere shows. */
    for (size_t i = 0; i < len; i++)
        ((char *)src)[i] = (char)~before[i];
    assert_int_equal(vm_rdma(lb, IBV_WR_RDMA_WRITE, src, lkey, dst, rkey, len),
                     IBV_WC_REM_ACCESS_ERR);
    assert_memory_equal(dst, before, len);
    free(before);
}

struct regcache_stats vm_stats(const regcache_t *cache)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(cache, &s), REGCACHE_OK);
    return s;
}

struct vm_run *vm_run_open(struct ibv_pd *pd, size_t alignment, size_t len)
{
    struct vm_run *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->cache = vm_cache(pd, VM_ACCESS_ALL, alignment);
    assert_int_equal(loopback_create(pd, &r->lb), 0);
    r->len = len;
    r->src = vm_pages(len);
    assert_int_equal(regcache_get(r->cache, r->src, len, &r->src_entry), REGCACHE_OK);
    return r;
}

void vm_run_close(struct vm_run *r)
{
    regcache_put(r->cache, r->src_entry);
    loopback_destroy(&r->lb);
    regcache_destroy(r->cache);
    vm_pages_free(r->src, r->len);
    free(r);
}

bool vm_write_arrives(struct vm_run *r, char *dst, size_t len, int seed)
{
    assert_true(len <= r->len);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(r->cache, dst, len, &e), REGCACHE_OK);
    vm_fill(r->src, len, seed);
    memset(dst, 0, len);
    assert_int_equal(
        vm_rdma(&r->lb, IBV_WR_RDMA_WRITE, r->src, vm_lkey(r->src_entry), dst, vm_rkey(e), len),
        IBV_WC_SUCCESS);
    regcache_put(r->cache, e);
    return memcmp(dst, r->src, len) == 0;
}
