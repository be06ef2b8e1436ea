/* The host memory monitor never runs a callback where a thread that holds
 * an application's lock could wait for it.  A deregistration callback that
 * takes the application's lock M is allowed ("the cache holds no lock
 * while it calls dereg"); while the monitor's deregistration of an
 * unmapped entry waits for M, the thread that holds M gets cached host
 * memory (through libc's hooks such a get catches up with the monitor
 * first) and unmaps watched memory (through the userfaultfd such an unmap
 * waits until the monitor thread has read it).  Both return.  A hang is a
 * failure, reported by alarm(). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "hang_alarm.h"
#include "host_fixture.h"
#include "test_sync.h"

#define LEN (2 * MiB)

struct app {
    pthread_mutex_t m; /* the application's lock */
    atomic_bool armed;
    atomic_int entered; /* deregistrations that reached the lock */
};

static void dereg_takes_m(void *arg, regcache_entry_t *e, unsigned rail, void *handle, void *priv)
{
    (void)e, (void)rail, (void)handle, (void)priv;
    struct app *a = arg;
    if (!atomic_load(&a->armed))
        return;
    atomic_fetch_add(&a->entered, 1);
    pthread_mutex_lock(&a->m);
    pthread_mutex_unlock(&a->m);
}

static bool entered(const void *arg)
{
    return atomic_load(&((const struct app *)arg)->entered) > 0;
}

static void holder_of_m_gets_and_unmaps(void **state)
{
    struct fx *f = *state;
    static struct app a = { .m = PTHREAD_MUTEX_INITIALIZER };
    f->p.on_deregister = dereg_takes_m;
    f->p.callback_arg = &a;
    hx_create(f);
    char *gone = hx_anon(NULL, LEN, 0), *kept = hx_anon(NULL, LEN, 0);
    fx_use(f, (uintptr_t)gone, LEN);
    fx_use(f, (uintptr_t)kept, LEN);
    hang_alarm(30, "a thread holding the application's lock waited for the monitor, "
                   "which waited for that lock in a deregistration");
    pthread_mutex_lock(&a.m);
    atomic_store(&a.armed, true);
    /* The monitor deregisters the entry of the unmapped range and waits
     * for M there. */
    assert_int_equal(munmap(gone, LEN), 0);
    assert_true(wait_until(entered, &a, HANG_SECONDS));
    regcache_entry_t *e = fx_get(f, (uintptr_t)kept, LEN);
    regcache_put(f->c, e);
    assert_int_equal(munmap(kept, LEN), 0);
    pthread_mutex_unlock(&a.m);
    hang_alarm_off();
    regcache_destroy(f->c);
    f->c = NULL;
    atomic_store(&a.armed, false);
}

int main(void)
{
    int status = hx_start();
    if (status)
        return status;
    return FX_RUN(fx_setup, fx_teardown, holder_of_m_gets_and_unmaps);
}
