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

void vm_dev_open(struct vm_dev *d)
{
    const char *why = NULL;
    d->ctx = loopback_open_first(&why);
    if (!d->ctx) {
        printf("SKIP: %s; this test runs inside the soft-RoCE VM, which "
               "`ctest -L vm` boots (tests/vm/run_vm_tests.sh)\n", why);
        exit(77);
    }
    d->pd = ibv_alloc_pd(d->ctx);
    if (!d->pd) {
        printf("FAIL: ibv_alloc_pd on %s\n", ibv_get_device_name(d->ctx->device));
        exit(1);
    }
}

void vm_dev_close(struct vm_dev *d)
{
    ibv_dealloc_pd(d->pd);
    ibv_close_device(d->ctx);
}

regcache_t *vm_cache(struct ibv_pd *pd, int access, size_t alignment)
{
    struct regcache_params p;
    regcache_t *cache = NULL;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.pd = pd;
    p.access = access;
    p.host_memory = 1;
    if (alignment)
        p.alignment = alignment;
    int rc = regcache_create(&p, &cache);
    if (rc != REGCACHE_OK)
        print_error("regcache_create: %s (%s)\n", regcache_strerror(rc),
                    regcache_last_error());
    assert_int_equal(rc, REGCACHE_OK);
    assert_non_null(cache);
    return cache;
}

void *vm_pages(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

void vm_pages_free(void *p, size_t len)
{
    assert_int_equal(munmap(p, len), 0);
}

int vm_provider_mrs(void)
{
    const char *cmd = "rdma resource show mr";
    char line[512];
    int n = 0;
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f))
        n += strncmp(line, "dev ", 4) == 0;
    int status = pclose(f);
    if (status != 0)
        print_error("`%s` exited with status %d\n", cmd, status);
    assert_int_equal(status, 0);
    return n;
}

int vm_rdma(struct loopback *lb, enum ibv_wr_opcode op, void *local,
            uint32_t lkey, void *remote, uint32_t rkey, size_t len)
{
    struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len,
                           .lkey = lkey };
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op,
        .wr.rdma = { .remote_addr = (uintptr_t)remote, .rkey = rkey },
    };
    return loopback_send_wait(lb, 0, &wr);
}

struct regcache_stats vm_stats(const regcache_t *cache)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(cache, &s), REGCACHE_OK);
    return s;
}
