/* Two named caches in one process, for regcache-stat's view of every
 * cache: "gpu-TAG", GPU memory through the fake CUDA driver (the fake
 * backend without its query callback), and "host-TAG", host memory
 * described by the fake backend.
 *
 *   named_caches_helper TAG [NAME]
 *
 * NAME, if given, becomes the process name first (what the kernel keeps
 * of it: 15 bytes).
 * Each cache gets a miss and a hit on one allocation, then, past the
 * 100 ms between two publications, a miss on another: its statistics
 * record holds 2 entries, 1 hit, 2 misses.  Then it answers "ready PID"
 * and keeps both caches until its input ends. */
#include <stdio.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "fake_backend.h"
#include "fake_driver.h"
#include "regcache.h"

#define MiB ((size_t)1 << 20)
#define HOST_BASE ((uintptr_t)0x200000000000ull)

static struct fake_backend gpu_fake, host_fake;

static int use(regcache_t *c, uintptr_t addr)
{
    regcache_entry_t *e;
    int rc = regcache_get(c, (void *)addr, 4096, &e);
    if (rc == REGCACHE_OK)
        regcache_put(c, e);
    return rc;
}

/* A miss and a hit on first, then past 100 ms a miss on second. */
static int exercise(regcache_t *c, uintptr_t first, uintptr_t second)
{
    int rc = use(c, first);
    if (rc == REGCACHE_OK)
        rc = use(c, first);
    nanosleep(&(struct timespec){ .tv_nsec = 120000000 }, NULL);
    return rc == REGCACHE_OK ? use(c, second) : rc;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3)
        return 2;
    if (argc == 3)
        prctl(PR_SET_NAME, argv[2]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    char gpu_name[64], host_name[64];
    snprintf(gpu_name, sizeof gpu_name, "gpu-%s", argv[1]);
    snprintf(host_name, sizeof host_name, "host-%s", argv[1]);

    drv_install();
    fake_init(&gpu_fake);
    fake_init(&host_fake);
    struct regcache_params p;
    fake_params(&gpu_fake, &p);
    gpu_fake.ops.query = NULL; /* the fake CUDA driver describes the memory */
    p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    p.name = gpu_name;
    regcache_t *gpu = NULL, *host = NULL;
    int rc = regcache_create(&p, &gpu);
    fake_params(&host_fake, &p);
    p.host_memory = 1;
    p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    p.name = host_name;
    if (rc == REGCACHE_OK)
        rc = regcache_create(&p, &host);
    fake_alloc(&host_fake, HOST_BASE, MiB, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    fake_alloc(&host_fake, HOST_BASE + 4 * MiB, MiB, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    drv_legacy(0, 2 * MiB);
    drv_legacy(4 * MiB, 2 * MiB);
    if (rc == REGCACHE_OK)
        rc = exercise(gpu, drv_addr(0), drv_addr(4 * MiB));
    if (rc == REGCACHE_OK)
        rc = exercise(host, HOST_BASE, HOST_BASE + 4 * MiB);
    if (rc != REGCACHE_OK) {
        printf("error %s: %s\n", regcache_strerror(rc), regcache_last_error());
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    char line[64];
    while (fgets(line, sizeof line, stdin))
        ;
    regcache_destroy(gpu);
    regcache_destroy(host);
    drv_uninstall();
    return 0;
}
