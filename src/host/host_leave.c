/* A range that leaves (host_leave.h). */
#include "host_leave.h"

#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>

#include "host_events.h"
#include "host_unmapping.h"

/* Set at load and never changed: relaxed loads. */
static _Atomic uintptr_t page_mask;
/* Set before any hook is installed. */
static _Atomic(const struct rc_host_watcher *) watcher;

void rc_host_leave_tell(const struct rc_host_watcher *w)
{
    atomic_store_explicit(&watcher, w, memory_order_release);
}

__attribute__((constructor)) static void learn_page_size(void)
{
    atomic_store_explicit(&page_mask, (uintptr_t)sysconf(_SC_PAGESIZE) - 1, memory_order_relaxed);
}

uintptr_t rc_host_page_mask(void)
{
    return atomic_load_explicit(&page_mask, memory_order_relaxed);
}

/* A range that may be watched is posted, and the monitor woken. */
static void post_if_watched(uintptr_t start, uintptr_t end)
{
    const struct rc_host_watcher *w = atomic_load_explicit(&watcher, memory_order_acquire);
    if (w && w->may_watch(start, end)) {
        rc_host_events_post(start, end);
        w->kick();
    }
}

static void round_out(uintptr_t *start, uintptr_t *end)
{
    uintptr_t mask = rc_host_page_mask();
    *start &= ~mask;
    if (*end < *start) /* wrapped: to the top */
        *end = UINTPTR_MAX & ~mask;
    else
        *end = (*end + mask) & ~mask;
}

void rc_host_leave_begin(struct rc_host_leave *l, uintptr_t start, uintptr_t end)
{
    round_out(&start, &end);
    l->start = start;
    l->end = end;
    l->token = RC_HOST_NO_TOKEN;
    if (start >= end)
        return;
    int saved = errno;
    l->token = rc_host_unmapping_begin(start, end);
    post_if_watched(start, end);
    errno = saved;
}

void rc_host_leave_end(const struct rc_host_leave *l)
{
    if (l->token == RC_HOST_NO_TOKEN)
        return;
    int saved = errno;
    post_if_watched(l->start, l->end);
    rc_host_unmapping_end(l->token);
    errno = saved;
}

void rc_host_leave_post(uintptr_t start, uintptr_t end)
{
    round_out(&start, &end);
    if (start >= end)
        return;
    int saved = errno;
    post_if_watched(start, end);
    errno = saved;
}
