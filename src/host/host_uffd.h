/* The host memory monitor's userfaultfd: pageable ranges registered with
 * it in write-protect mode, with no page ever protected, raise no fault;
 * the kernel only reports what happens to their mappings (unmap, remove,
 * remap), wherever that comes from - libc, its internal calls in free(), or
 * a raw system call - and the unmapping thread waits until the event is
 * read.  The monitor's locks serialise every call here (host_monitor.c)
 * but the reader's, which stops before the fd closes. */
#ifndef RC_HOST_UFFD_H
#define RC_HOST_UFFD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Open the fd once: 0, or an errno (why[n] says what it means). */
int rc_host_uffd_open(char *why, size_t n);

/* The fd, or -1 while none is open. */
int rc_host_uffd_fd(void);

/* Watch [start, end), whole mappings (registering part of one would split
 * it): false when the kernel refuses (a mapping it does not report, one
 * another userfaultfd watches). */
bool rc_host_uffd_register(uintptr_t start, uintptr_t end);
void rc_host_uffd_unregister(uintptr_t start, uintptr_t end);

/* The reader thread: read the queued events and post their ranges to the
 * queue of unmaps (host_events.h). */
void rc_host_uffd_read(void);

/* Close the fd (the kernel forgets every registration with it); also in
 * a fork's child, whose fd would report the parent's mappings. */
void rc_host_uffd_close(void);

#endif
