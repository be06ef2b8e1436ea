/* A test double of libcuda.so.1 (built as a library of that name): the
 * memory functions the hook wraps, cuGetProcAddress in both forms, and a log
 * of every call in the order it ran, which the tests read to see that the
 * cache let go of a range before the driver freed it.  Addresses are made
 * up and never touched.  Single-threaded.
 *
 * Stream capture is modelled as the driver documents it (and as
 * fake_driver.h models it behind the seam): a thread whose interaction mode
 * (cuThreadExchangeStreamCaptureMode; GLOBAL at first) is not RELAXED is
 * restricted while it has a capture of its own begun in another mode than
 * RELAXED and, in GLOBAL mode, while any other thread has one begun in
 * GLOBAL mode.  A restricted thread's call of any function but the
 * stream-ordered ones (cuMemAllocAsync, cuMemFreeAsync and their kin),
 * cuInit, cuDriverGetVersion, cuGetProcAddress and the exchange fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates those captures:
 * strict, since the driver publishes no list, so that every call a hook
 * makes on its own behalf must run relaxed.
 *
 * Built with FAKECUDA_MEASURED_PROLOGUE (x86-64), the functions the
 * in-process interception patches start with the bytes measured at
 * libcuda's entries, except cuMemFreeHost, which starts with another
 * patcher's jmp; FAKECUDA_UNRECOGNISED_UNMAP gives cuMemUnmap an entry the
 * interception must refuse; FAKECUDA_CMP_AFTER_PUSHES puts the instruction
 * the interception patches at +6 instead of +10 (fake_libcuda.c). */
#ifndef FAKE_LIBCUDA_H
#define FAKE_LIBCUDA_H

#include <stddef.h>
#include <stdint.h>

#define FAKECUDA_SLOT_SIZE ((size_t)1 << 20) /* largest allocation */

enum fakecuda_event_type {
    FAKECUDA_CALL, /* a driver function ran (after its work, for allocations;
                      before it, for frees) */
    FAKECUDA_DEREG /* the test backend deregistered a range */
};

struct fakecuda_event {
    enum fakecuda_event_type type;
    const char *fn; /* the driver function (its exported name); NULL for
                       FAKECUDA_DEREG */
    uintptr_t addr;
    size_t len;
    int live; /* FAKECUDA_DEREG: was addr still allocated at that moment */
};

/* Forget every allocation, event and capture; the calling thread's capture
 * mode is GLOBAL again. */
void fakecuda_reset(void);
/* The log so far; returns its length. */
size_t fakecuda_events(const struct fakecuda_event **events);
void fakecuda_log_dereg(uintptr_t addr, size_t len);

/* Allocate (host: pinned host memory) or free without calling any driver
 * entry point, as a free the hook never saw. */
uintptr_t fakecuda_alloc_unhooked(size_t size, int host);
void fakecuda_free_unhooked(uintptr_t addr);

/* The allocation holding addr: 0 and its base, size, buffer id and whether
 * it is host memory, or -1 when addr is not allocated. */
int fakecuda_describe(uintptr_t addr, uintptr_t *base, size_t *size, uint64_t *id, int *host);

/* Begin a capture in `mode` (a CUstreamCaptureMode) on the calling thread:
 * its index, or -1 when four are in progress.  End capture i: CUDA_SUCCESS,
 * or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when a refused call invalidated
 * it. */
int fakecuda_capture_begin(int mode);
int fakecuda_capture_end(int i);
/* The calling thread's interaction mode, and how many calls were refused
 * for a capture so far. */
int fakecuda_thread_mode(void);
int fakecuda_capture_refusals(void);

/* The fake's own definition of an exported name (never a wrapper). */
void *fakecuda_own(const char *symbol);

/* Built with FAKECUDA_MEASURED_PROLOGUE: how often the hook that another
 * patcher left at cuMemFreeHost's entry ran. */
int fakecuda_other_patcher_calls(void);

#endif
