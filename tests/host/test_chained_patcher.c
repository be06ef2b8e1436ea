/* Another patcher of munmap that comes after the monitor.  One that chains
 * to what it displaced (as funchook and Frida do): the monitor takes the
 * front again, and a munmap then runs each hook once - the monitor's old
 * thunk, which the other's trampoline leads to, goes straight on to libc -
 * instead of going round the two for ever (alarm); the monitor still sees
 * the unmap.  One that calls the system itself and patches on top again
 * each time the monitor did (a patching war): the monitor takes the front
 * a bounded number of times, then gives up, and the entries cached from
 * then on are counted unmonitored instead of trusted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "chain_patcher.h"
#include "hang_alarm.h"
#include "host_case.h"

#define LEN (4 * MiB)

static char *anon(void *at, int flags)
{
    char *p = mmap(at, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

static struct chain_patch chained;
static char *counted; /* the range whose unmaps its hook counts */
static atomic_int chained_calls;

static int chaining_munmap(void *addr, size_t len)
{
    if (addr == counted)
        atomic_fetch_add(&chained_calls, 1);
    return ((int (*)(void *, size_t))chained.displaced)(addr, len);
}

static void chaining_patcher_after_the_monitor(void **state)
{
    struct fx *f = *state;
    host_create(f);
    char *p = anon(NULL, 0);
    counted = p;
    fx_use(f, (uintptr_t)p, LEN);
    assert_int_equal(chain_patch(&chained, libc_fn("munmap"), (void *)chaining_munmap), 0);
    hang_alarm(30, "munmap went round the monitor's hook and the other patcher's");
    /* A miss: the monitor finds its patch of munmap covered and takes the
     * front again (if its thread has not already). */
    char *q = anon(NULL, 0);
    fx_use(f, (uintptr_t)q, LEN);
    assert_int_equal(munmap(p, LEN), 0);
    hang_alarm_off();
    assert_int_equal(atomic_load(&chained_calls), 1);
    anon(p, MAP_FIXED_NOREPLACE);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 3), FX_STAT(hits, 0), NULL);
    assert_true(fx_stats(f).invalidations_monitor >= 1);
    regcache_destroy(f->c);
    f->c = NULL;
    munmap(p, LEN);
    munmap(q, LEN);
    assert_int_equal(atomic_load(&chained_calls), 2);
}

/* The rounds of the war: more than the monitor may take the front. */
#define ROUNDS 40

static atomic_int warring_calls;

static int warring_munmap(void *addr, size_t len)
{
    atomic_fetch_add(&warring_calls, 1);
    return (int)syscall(SYS_munmap, addr, len);
}

static void patching_war_ends(void **state)
{
    struct fx *f = *state;
    host_create(f);
    uint8_t *entry = libc_fn("munmap");
    static struct chain_patch war[ROUNDS];
    int taken_back = 0, unmonitored = 0;
    char *p[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        assert_int_equal(chain_patch(&war[round], entry, (void *)warring_munmap), 0);
        const uint8_t *site = entry + war[round].site;
        uint8_t mine[5];
        memcpy(mine, site, sizeof mine);
        p[round] = anon(NULL, 0);
        fx_use(f, (uintptr_t)p[round], LEN); /* a miss: the monitor looks */
        taken_back += memcmp(site, mine, sizeof mine) != 0;
        unmonitored = (int)fx_stats(f).host_unmonitored;
    }
    print_message("  the monitor took the front %d times in %d rounds; %d entries unmonitored\n",
                  taken_back, ROUNDS, unmonitored);
    assert_true(taken_back > 0 && taken_back < ROUNDS / 2);
    assert_true(unmonitored > 0);
    assert_true(strstr(regcache_validation_reason(f->c), "host memory: monitored by patching"));
    regcache_destroy(f->c);
    f->c = NULL;
    for (int round = 0; round < ROUNDS; round++)
        munmap(p[round], LEN);
}

FX_MAIN(chaining_patcher_after_the_monitor, patching_war_ends)
