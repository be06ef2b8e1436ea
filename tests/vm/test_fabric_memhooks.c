/* Beside libfabric's memory monitor "memhooks", which patches libc's mmap,
 * munmap, mremap, madvise, shmat, shmdt and brk itself (an absolute jump
 * through %r11 over the entry, to a hook that makes the system call): in
 * either order - libfabric's verbs domain, and with it memhooks, opened
 * before the first cache or after it - a cached WRITE target is unmapped
 * and mapped again, and the next WRITE arrives in the new pages (the
 * monitor saw the unmap), with nothing going round for ever (alarm).
 * Patched over after the first cache, the monitor takes the front again
 * at its next miss (or within 50 ms): an unmap before that goes unseen, as
 * docs/design.md says, so the test makes that miss first.  Each order in a
 * process of its own: the program runs itself once per order. */
#include "vm_env.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define LEN ((size_t)4 << 20)

static struct vm_dev dev;
static struct fid_fabric *fabric;
static struct fid_domain *domain;

/* A verbs domain with its memory registration cache, which starts
 * memhooks (FI_MR_CACHE_MONITOR=memhooks). */
static void open_fabric(void)
{
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    assert_non_null(hints);
    hints->fabric_attr->prov_name = strdup("verbs");
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = FI_MSG | FI_RMA;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
    if (rc)
        fail_msg("fi_getinfo(verbs): %s", fi_strerror(-rc));
    assert_int_equal(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
    assert_int_equal(fi_domain(fabric, info, &domain, NULL), 0);
    fi_freeinfo(info);
    fi_freeinfo(hints);
}

/* memhooks' jump at libc's munmap: movabs $hook,%r11 ... jmp *%r11,
 * at the entry or, under the monitor's own jump, behind it. */
static int memhooks_at_munmap(void)
{
    const uint8_t *e = (const uint8_t *)munmap;
    return (e[0] == 0x49 && e[1] == 0xbb) || e[0] == 0xe9;
}

static char *anon(void *at, int flags)
{
    char *p = mmap(at, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

static void write_into(regcache_t *c, struct loopback *lb, char *src, regcache_entry_t *src_e,
                       char *dst, int seed)
{
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, dst, LEN, &e), REGCACHE_OK);
    vm_fill(src, LEN, seed);
    memset(dst, 0, LEN);
    assert_int_equal(vm_rdma(lb, IBV_WR_RDMA_WRITE, src, vm_lkey(src_e), dst, vm_rkey(e), LEN),
                     IBV_WC_SUCCESS);
    regcache_put(c, e);
    if (memcmp(dst, src, LEN))
        fail_msg("the WRITE (seed %d) did not arrive in the pages now at %p", seed, (void *)dst);
}

static void hung(int sig)
{
    (void)sig;
    static const char msg[] = "hung (alarm): beside libfabric's memhooks\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(1);
}

static void beside_memhooks(void **state)
{
    const char *order = *state;
    signal(SIGALRM, hung);
    alarm(60);
    bool fabric_first = strcmp(order, "fabric_first") == 0;
    if (fabric_first)
        open_fabric();
    regcache_t *c = vm_cache(dev.pd, VM_ACCESS_ALL, 4096);
    const char *why = regcache_validation_reason(c);
    if (!strstr(why, "host memory: monitored by patching libc"))
        fail_msg("%s: %s", order, why);
    struct loopback lb;
    assert_int_equal(loopback_create(dev.pd, &lb), 0);
    char *src = anon(NULL, 0), *p = anon(NULL, 0);
    regcache_entry_t *src_e;
    assert_int_equal(regcache_get(c, src, LEN, &src_e), REGCACHE_OK);
    write_into(c, &lb, src, src_e, p, 1);
    char *other = anon(NULL, 0);
    if (!fabric_first) {
        open_fabric();
        if (memcmp(munmap, "\x49\xbb", 2) != 0)
            fail_msg("%s: memhooks did not patch munmap", order);
        write_into(c, &lb, src, src_e, other, 9); /* the miss */
    }
    if (!memhooks_at_munmap())
        fail_msg("%s: memhooks did not patch munmap", order);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(munmap(p, LEN), 0);
        anon(p, MAP_FIXED_NOREPLACE);
        write_into(c, &lb, src, src_e, p, 2 + round);
    }
    struct regcache_stats s = vm_stats(c);
    assert_true(s.invalidations_monitor >= 3);
    alarm(0);
    regcache_put(c, src_e);
    loopback_destroy(&lb);
    regcache_destroy(c);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    munmap(p, LEN);
    munmap(other, LEN);
    munmap(src, LEN);
}

/* Each order in a process of its own: libc stays patched. */
static int run_order(const char *self, const char *order)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("FABRIC_ORDER", order, 1);
        execl(self, self, (char *)NULL);
        _exit(127);
    }
    int status;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *order = getenv("FABRIC_ORDER");
    if (!order) {
        int failed = run_order(argv[0], "fabric_first") | run_order(argv[0], "cache_first");
        if (!failed)
            printf("fabric_memhooks: WRITEs arrived beside memhooks, in either order\n");
        return failed;
    }
    setenv("FI_MR_CACHE_MONITOR", "memhooks", 1);
    setenv("REGCACHE_HOST_MONITOR", "libc", 1);
    vm_dev_open(&dev);
    const struct CMUnitTest tests[] = { cmocka_unit_test_prestate(beside_memhooks, (void *)order) };
    int failed = cmocka_run_group_tests_name(order, tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed ? 1 : 0;
}
