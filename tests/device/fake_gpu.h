/* The CUDA seam for the device key tables' tests: GPUs whose memory is
 * host memory, so that threads standing in for kernels read the tables
 * through regcache_device.h's host build.  Unlike tests/common's fake
 * driver it is thread safe (the table's thread, the test's threads and the
 * deregistering ones all call it): contexts are per thread, counts atomic.
 * A copy is made when its stream is synchronised, from what its source
 * holds then (as late as a GPU may read it), and writes 8-byte words in
 * address order (or the reverse, while `backwards` is set), each with a
 * release store, so that a reader may see any prefix of it - the order a
 * kernel may see a DMA land in least favours the table. */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H

#include <stdatomic.h>

struct fake_gpu {
    int devices;
    atomic_long allocs, host_allocs, streams, retained; /* live now */
    /* Failure injection: the next alloc (device memory) or copy fails. */
    atomic_int fail_alloc, fail_copy;
    /* While hold_copies is set, a copy waits before it writes anything (as
     * one queued behind a kernel that waits for the host would); each copy
     * that waited so is counted in copies_held. */
    atomic_int hold_copies;
    atomic_long copies_held;
    /* Copies enqueued and the bytes they write, and the synchronisations
     * that waited for them: what a write to a table cost. */
    atomic_long copies, bytes_copied, syncs;
    /* Called after each word a copy writes, when set: a test's look at the
     * device between any two words. */
    void (*after_word)(void);
    /* While set, a copy writes its words from its last to its first: the
     * other way round a kernel may see it land. */
    atomic_int backwards;
};

extern struct fake_gpu fake_gpu;

/* Route the library's driver calls here: `devices` GPUs, nothing live. */
void fake_gpu_install(int devices);
void fake_gpu_uninstall(void);

#endif
