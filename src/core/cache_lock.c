/* The slow sides of the cache lock and its condition (cache_lock.h). */
#include "cache_lock.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu_relax.h"

/* Sleep while *word still reads `expected` (a wake or a change ends it). */
static void futex_wait(atomic_uint *word, unsigned expected)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *word, int n)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Take l as 2, sleeping while another thread holds it: a thread that has
 * slept cannot tell whether others sleep too, so its unlock must wake one. */
static void lock_sleeping(struct rc_lock *l)
{
    while (atomic_exchange_explicit(&l->word, 2, memory_order_acquire) != 0)
        futex_wait(&l->word, 2);
}

/* Spins before sleeping: about as long as a short critical section. */
#define SPINS 100

void rc_lock_contended(struct rc_lock *l)
{
    for (int i = 0; i < SPINS; i++) {
        rc_cpu_relax();
        unsigned unlocked = 0;
        if (atomic_load_explicit(&l->word, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->word, &unlocked, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
    }
    lock_sleeping(l);
}

void rc_lock_wake(struct rc_lock *l)
{
    futex_wake(&l->word, 1);
}

void rc_cond_wait(struct rc_cond *c, struct rc_lock *l)
{
    /* Read under the lock: a broadcast after the unlock changes it, and
     * the sleep then returns at once. */
    unsigned seq = atomic_load_explicit(&c->seq, memory_order_relaxed);
    rc_unlock(l);
    futex_wait(&c->seq, seq);
    /* The broadcast woke every waiter: the others may be sleeping on the
     * lock by now. */
    lock_sleeping(l);
}

static void cond_wake(struct rc_cond *c, int n)
{
    atomic_fetch_add_explicit(&c->seq, 1, memory_order_relaxed);
    futex_wake(&c->seq, n);
}

void rc_cond_broadcast(struct rc_cond *c)
{
    cond_wake(c, INT_MAX);
}

void rc_cond_signal(struct rc_cond *c)
{
    cond_wake(c, 1);
}
