/* Asymmetric fences: where one side of a handshake runs on every put or
 * every free and the other side rarely (a detach that finds its entry held,
 * a destroy that waits for notify walkers), the frequent side issues only a
 * compiler barrier and the rare side makes every running thread of the
 * process execute a full barrier with membarrier(PRIVATE_EXPEDITED).
 * Without that system call (old kernels, some sandboxes) both sides fall
 * back to seq_cst fences. */
#ifndef RC_ASYM_FENCE_H
#define RC_ASYM_FENCE_H

#include <stdatomic.h>
#include <stdbool.h>

extern atomic_bool rc_heavy_fence_works;

/* Register the process for expedited membarrier; once, at cache creation. */
void rc_fence_setup(void);

/* The frequent side: between its store and its load. */
static inline void rc_fence_light(void)
{
    if (atomic_load_explicit(&rc_heavy_fence_works, memory_order_relaxed))
        atomic_signal_fence(memory_order_seq_cst);
    else
        atomic_thread_fence(memory_order_seq_cst);
}

/* The rare side: between its store and its load. */
void rc_fence_heavy(void);

#endif
