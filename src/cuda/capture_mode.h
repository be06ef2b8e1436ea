/* Stream capture and the library's own driver calls.  While an application
 * captures a stream into a CUDA graph, the driver refuses the calls it deems
 * potentially unsafe (cuPointerSetAttribute(SYNC_MEMOPS) among them) from
 * every thread whose capture interaction mode is not RELAXED, and the refusal
 * invalidates the application's capture.  The driver's way for a library is
 * to exchange the calling thread's mode to RELAXED around its own calls and
 * back after them: rc_relax() and rc_unrelax().  Shared by the CUDA seam
 * (every library call), the in-process interception (its self-test) and the
 * wrappers of both hooks (their range query), which each reach the driver in
 * their own way: header-only, so that the preload hook builds it too. */
#ifndef RC_CAPTURE_MODE_H
#define RC_CAPTURE_MODE_H

#include <stdbool.h>

#include <cuda.h>

/* cuThreadExchangeStreamCaptureMode. */
typedef CUresult (*rc_exchange_fn)(CUstreamCaptureMode *mode);

/* The mode to give back, and whether there is one: when the exchange fails
 * (or the driver has none) the thread's mode was not changed. */
struct rc_relaxed {
    CUstreamCaptureMode saved;
    bool exchanged;
};

static inline struct rc_relaxed rc_relax(rc_exchange_fn exchange)
{
    struct rc_relaxed r = { .saved = CU_STREAM_CAPTURE_MODE_RELAXED, .exchanged = false };
    r.exchanged = exchange && exchange(&r.saved) == CUDA_SUCCESS;
    return r;
}

static inline void rc_unrelax(rc_exchange_fn exchange, struct rc_relaxed *r)
{
    if (r->exchanged)
        exchange(&r->saved);
}

#endif
