/* The cache lock, and the condition that misses wait on for a registration
 * in flight.
 *
 * A futex word rather than a pthread mutex: every miss takes the lock
 * twice, and glibc's lock and unlock, called through the PLT and checking
 * the mutex's type, cost about 55 instructions a round trip where these
 * inline ones cost a few; the locked instructions are the same (one to
 * lock, one to unlock).  The word is 0 (free), 1 (held) or 2 (held, and a
 * thread may sleep on it): an unlock wakes a sleeper only after a lock
 * found it held.  Under contention a locker spins briefly before it
 * sleeps, as glibc's adaptive mutex does; the critical sections are short. */
#ifndef RC_CACHE_LOCK_H
#define RC_CACHE_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>

struct rc_lock {
    atomic_uint word;
};

/* A registration ended: bumps its count, which waiters sleep on. */
struct rc_cond {
    atomic_uint seq;
};

static inline void rc_lock_init(struct rc_lock *l)
{
    atomic_init(&l->word, 0);
}

static inline void rc_cond_init(struct rc_cond *c)
{
    atomic_init(&c->seq, 0);
}

void rc_lock_contended(struct rc_lock *l);
void rc_lock_wake(struct rc_lock *l);

static inline void rc_lock(struct rc_lock *l)
{
    unsigned unlocked = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->word, &unlocked, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        rc_lock_contended(l);
}

static inline bool rc_trylock(struct rc_lock *l)
{
    unsigned unlocked = 0;
    return atomic_compare_exchange_strong_explicit(&l->word, &unlocked, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

static inline void rc_unlock(struct rc_lock *l)
{
    if (atomic_exchange_explicit(&l->word, 0, memory_order_release) == 2)
        rc_lock_wake(l);
}

/* With l held: release it, sleep until a broadcast on c (or a spurious
 * wake: callers recheck their condition in a loop), take l again. */
void rc_cond_wait(struct rc_cond *c, struct rc_lock *l);
/* Wake every waiter on c; called with the lock they use held. */
void rc_cond_broadcast(struct rc_cond *c);
/* Wake one of them (at least one, if any wait); likewise. */
void rc_cond_signal(struct rc_cond *c);

#endif
