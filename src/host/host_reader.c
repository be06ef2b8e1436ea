/* The userfaultfd reader (host_reader.h). */
#include "host_reader.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "host_uffd.h"

static int stop_fd = -1; /* an eventfd: its thread stops */
static void (*wake_monitor)(void);
static bool running; /* under the monitor's life lock, as stop_fd */
static pthread_t thread;

static void *reader(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = stop_fd, .events = POLLIN },
                               { .fd = rc_host_uffd_fd(), .events = POLLIN } };
        if (poll(p, 2, -1) < 0)
            continue; /* EINTR */
        if (p[0].revents & POLLIN)
            return NULL;
        if (p[1].revents & POLLIN) {
            rc_host_uffd_read();
            wake_monitor();
        }
    }
}

bool rc_host_reader_start(void (*kick)(void))
{
    if (running)
        return true;
    wake_monitor = kick;
    stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd < 0)
        return false;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    running = !pthread_create(&thread, NULL, reader, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (running) {
        pthread_setname_np(thread, "regcache-uffd");
    } else {
        close(stop_fd);
        stop_fd = -1;
    }
    return running;
}

void rc_host_reader_stop(void)
{
    if (!running)
        return;
    uint64_t one = 1;
    if (write(stop_fd, &one, sizeof one) < 0) {
        /* A fresh eventfd takes one write. */
    }
    pthread_join(thread, NULL);
    close(stop_fd);
    stop_fd = -1;
    running = false;
}

void rc_host_reader_forget(void)
{
    if (stop_fd >= 0)
        close(stop_fd);
    stop_fd = -1;
    running = false;
}
