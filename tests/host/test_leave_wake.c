/* A leave notice does not wait for the transport's next call: once watched
 * memory is unmapped, the monitor is woken and the notice arrives while
 * the application only waits on a condition variable - for an entry held
 * (at once) and for one unused (just before its deregistration) - and so
 * again once the monitor stopped with the last cache and started with the
 * next.  How soon is the benchmark's to say (bench/leave_notice.c). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "hang_alarm.h"
#include "host_fixture.h"

#define LEN (2 * MiB)

struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int notices;
};

static void noticed(void *arg, const struct regcache_leave *l)
{
    (void)l;
    struct waiter *w = arg;
    pthread_mutex_lock(&w->lock);
    w->notices++;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void unmapped_then_waited(void **state)
{
    struct fx *f = *state;
    static struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    w.notices = 0;
    f->p.on_leave = noticed;
    f->p.callback_arg = &w;
    hx_create(f);
    char *held = hx_anon(NULL, LEN, 0), *unused = hx_anon(NULL, LEN, 0);
    regcache_entry_t *e = fx_get(f, (uintptr_t)held, LEN);
    fx_use(f, (uintptr_t)unused, LEN);
    hang_alarm(30, "no leave notice without a further call");
    assert_int_equal(munmap(held, LEN), 0);
    assert_int_equal(munmap(unused, LEN), 0);
    pthread_mutex_lock(&w.lock);
    while (w.notices < 2)
        pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    hang_alarm_off();
    regcache_put(f->c, e);
}

/* The first test's cache was the process's last: the monitor stopped. */
static void again_with_the_next_cache(void **state)
{
    unmapped_then_waited(state);
}

int main(void)
{
    int status = hx_start();
    if (status)
        return status;
    return FX_RUN(fx_setup, fx_teardown, unmapped_then_waited, again_with_the_next_cache);
}
