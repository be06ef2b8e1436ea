/* Asymmetric fences: where one side of a handshake runs on every put or
 * every free and the other side rarely (a detach that finds its entry held,
 * a destroy that waits for notify walkers), the frequent side issues only a
 * compiler barrier and the rare side makes every running thread of the
 * process execute a full barrier with membarrier(PRIVATE_EXPEDITED).
 * Without that system call (old kernels, some sandboxes) both sides fall
 * back to seq_cst fences.  Where it worked at first and then keeps failing
 * (ENOMEM), every frequent side is switched to real fences: each reads the
 * flag that says whether it may skip its fence - rc_heavy_fence_works, a
 * cache's fenceless or put_flags - relaxed and after its store, so that the
 * switch covers one that read it just before (asym_fence.c). */
#ifndef RC_ASYM_FENCE_H
#define RC_ASYM_FENCE_H

#include <stdatomic.h>
#include <stdbool.h>

extern atomic_bool rc_heavy_fence_works;

/* The membarrier system call; tests replace it to make it fail. */
extern long (*rc_membarrier)(int cmd);

/* Register the process for expedited membarrier; once, at cache creation.
 * `demoted`, when not NULL, is what the switch to real fences calls to
 * switch the flags of every user too (each cache's). */
void rc_fence_setup(void (*demoted)(void));

#if defined(__SANITIZE_THREAD__)
#define RC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RC_TSAN 1
#endif
#endif

/* A seq_cst fence.  On x86-64 one locked instruction on the stack word 64
 * bytes below the stack pointer, in the red zone, whose value it writes
 * back unchanged.  gcc's own fence locks the word at the stack pointer,
 * which a function's pushes have mostly just written, and a locked
 * instruction waits for a store to its word that is still in flight: a
 * HOOKS hit is slower with it whenever the hit saves registers
 * (bench/ab/run.sh hooks compares).  64 bytes down lies below the return
 * address of any call this frame makes, but within the frames of calls it
 * made before: so this is the fence of code that has called nothing yet
 * (the hit's); the evictor's claim, after several calls, is slower with
 * it than with the C11 fence (bench/ab/run.sh churn) and keeps that.  Elsewhere, and under TSan
 * (which models only the C11 fence), the C11 fence. */
static inline void rc_fence_full(void)
{
#if defined(__x86_64__) && !defined(RC_TSAN)
    __asm__ __volatile__("lock orl $0, -64(%%rsp)" ::: "memory", "cc");
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* The frequent side: between its store and its load.  The flag is read
 * after the store. */
static inline void rc_fence_light(void)
{
    atomic_signal_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&rc_heavy_fence_works, memory_order_relaxed))
        atomic_thread_fence(memory_order_seq_cst);
}

/* The rare side: between its store and its load.  A membarrier that fails
 * is tried again; one that keeps failing switches the frequent sides to
 * real fences for good, and returns once that switch is safe: after a
 * barrier that succeeds, or after a bounded wait where none does
 * (asym_fence.c).  It always returns, whatever the kernel answers. */
void rc_fence_heavy(void);

#endif
