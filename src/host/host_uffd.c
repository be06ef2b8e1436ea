/* The userfaultfd of the host memory monitor (host_uffd.h). */
#include "host_uffd.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "host_events.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM 0
#endif

#define EVENTS (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)

/* Changed under both of the monitor's locks; read by its thread. */
static atomic_int uffd = -1;

/* A userfaultfd that reports the events, with write-protect registration
 * of shared memory too where the kernel has it; -1 and errno otherwise. */
static int open_with(uint64_t features)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0 && errno == EINVAL) /* before Linux 5.11 */
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct uffdio_api api = { .api = UFFD_API, .features = features };
    if (ioctl(fd, UFFDIO_API, &api) || !(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP) ||
        !(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
        int e = errno ? errno : ENOSYS;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int rc_host_uffd_open(char *why, size_t n)
{
    if (uffd >= 0)
        return 0;
    errno = 0;
    int fd = open_with(EVENTS | UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
    if (fd < 0 && errno == EINVAL) /* a kernel without it for shared memory */
        fd = open_with(EVENTS);
    if (fd < 0) {
        int err = errno;
        snprintf(why, n, "userfaultfd: %s%s", strerror(err),
                 err == EPERM ? "; vm.unprivileged_userfaultfd=0 or a seccomp filter" : "");
        return err;
    }
    uffd = fd;
    return 0;
}

int rc_host_uffd_fd(void)
{
    return uffd;
}

bool rc_host_uffd_register(uintptr_t start, uintptr_t end)
{
    struct uffdio_register r = { .range = { start, end - start }, .mode = UFFDIO_REGISTER_MODE_WP };
    return uffd >= 0 && ioctl(uffd, UFFDIO_REGISTER, &r) == 0;
}

void rc_host_uffd_unregister(uintptr_t start, uintptr_t end)
{
    struct uffdio_range r = { start, end - start };
    if (uffd >= 0)
        (void)ioctl(uffd, UFFDIO_UNREGISTER, &r); /* gone already: nothing to undo */
}

static void post(const struct uffd_msg *m)
{
    switch (m->event) {
    case UFFD_EVENT_UNMAP:
    case UFFD_EVENT_REMOVE:
        rc_host_events_post((uintptr_t)m->arg.remove.start, (uintptr_t)m->arg.remove.end);
        break;
    case UFFD_EVENT_REMAP:
        rc_host_events_post((uintptr_t)m->arg.remap.from,
                            (uintptr_t)(m->arg.remap.from + m->arg.remap.len));
        break;
    default:
        break; /* no page is protected: no fault can come */
    }
}

void rc_host_uffd_read(void)
{
    struct uffd_msg msgs[64];
    rc_host_events_read_begin();
    ssize_t got = read(uffd, msgs, sizeof msgs);
    for (ssize_t i = 0; i < got / (ssize_t)sizeof msgs[0]; i++)
        post(&msgs[i]);
    rc_host_events_read_end();
}

void rc_host_uffd_close(void)
{
    if (uffd >= 0)
        close(uffd);
    uffd = -1;
}
