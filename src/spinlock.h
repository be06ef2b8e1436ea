/* A test-and-test-and-set spinlock for the page index shards.  Their
 * critical sections are a hash probe and one CAS, far shorter than a futex
 * round trip, and an uncontended pthread mutex costs about as much as the
 * whole hit path. */
#ifndef RC_SPINLOCK_H
#define RC_SPINLOCK_H

#include <stdatomic.h>

typedef struct {
    atomic_int locked;
} rc_spinlock_t;

static inline void rc_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline void rc_spin_lock(rc_spinlock_t *l)
{
    for (;;) {
        if (!atomic_exchange_explicit(&l->locked, 1, memory_order_acquire))
            return;
        /* Spin on a plain load so waiters share the line instead of
         * bouncing it with writes. */
        while (atomic_load_explicit(&l->locked, memory_order_relaxed))
            rc_cpu_relax();
    }
}

static inline void rc_spin_unlock(rc_spinlock_t *l)
{
    atomic_store_explicit(&l->locked, 0, memory_order_release);
}

#endif
