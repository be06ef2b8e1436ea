/* The GPU cache: refused memory, SYNC_MEMOPS, a fork child's memory. */
#include <sys/wait.h>

#include "gpu_cache.h"

/* ------------------------------------------------------------------------ */
/* Refused memory, SYNC_MEMOPS                                               */
/* ------------------------------------------------------------------------ */

void managed_and_host_memory_are_refused(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr m;
    void *pinned;
    char *heap = malloc(MIB);
    CK(cu.cuMemAllocManaged(&m, MIB, CU_MEM_ATTACH_GLOBAL));
    CK(cu.cuMemAllocHost(&pinned, MIB));
    assert_int_equal(get_status(c, m, 4096), REGCACHE_ERR_MANAGED);
    assert_int_equal(get_status(c, (uintptr_t)pinned, 4096), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(get_status(c, (uintptr_t)heap, 4096), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(atomic_load(&regs), 0);
    regcache_destroy(c);
    CK(cu.cuMemFree(m));
    CK(cu.cuMemFreeHost(pinned));
    free(heap);
}

void sync_memops_is_set_before_the_first_registration(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    CK(cu.cuMemAlloc(&p, MIB));
    assert_int_equal(sync_memops_of(p), 0);
    regcache_entry_t *e;
    struct handle *h = get_checked(c, p, MIB, &e);
    assert_int_equal(h->sync, 1); /* already set when reg ran */
    regcache_put(c, e);
    assert_int_equal(sync_memops_of(p), 1);
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
}

static int reg_nothing(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)arg, (void)len, (void)device, (void)rail;
    *handle = addr;
    return 0;
}

static void dereg_nothing(void *arg, void *handle)
{
    (void)arg, (void)handle;
}

/* In a fork child: a new cache (host_memory as given) and a get of
 * [addr, addr + 4096); the get's status, or 1 when the cache cannot be
 * had. */
static int child_get(int host_memory, uintptr_t addr)
{
    struct regcache_backend b = { .reg = reg_nothing, .dereg = dereg_nothing };
    struct regcache_params p;
    regcache_params_init(&p);
    p.backend = &b;
    p.host_memory = host_memory;
    p.host_monitor = REGCACHE_HOST_MONITOR_OFF;
    regcache_t *c;
    regcache_entry_t *e;
    if (regcache_create(&p, &c) != REGCACHE_OK)
        return 1;
    int rc = regcache_get(c, (void *)addr, 4096, &e);
    if (rc == REGCACHE_OK)
        regcache_put(c, e);
    else
        fprintf(stderr, "child: %s: %s\n", regcache_strerror(rc), regcache_last_error());
    regcache_destroy(c);
    return rc;
}

/* CUDA does not survive fork(): in a child of this process, which uses
 * the driver, every driver call fails.  A cache made there has no driver:
 * it registers host memory with host_memory, and refuses the parent's GPU
 * memory as memory it cannot use, where the driver's failure would fail
 * every get. */
void fork_child_has_no_driver(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    CK(cu.cuMemAlloc(&p, MIB));
    regcache_entry_t *e;
    get_checked(c, p, MIB, &e);
    regcache_put(c, e);
    char *heap = malloc(MIB);
    assert_non_null(heap);
    memset(heap, 1, MIB);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int host = child_get(1, (uintptr_t)heap), gpu = child_get(0, p);
        _exit(host != REGCACHE_OK ? 1 : gpu != REGCACHE_ERR_NOT_GPU ? 2 : 0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent's driver still answers. */
    get_checked(c, p, MIB, &e);
    regcache_put(c, e);
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
    free(heap);
}
