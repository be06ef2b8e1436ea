/* At exit, the library's own threads call no application code after the
 * destructors of the libraries that depend on it began: a library
 * (exit_dep.c) whose cache's backend is its own code tears that code's
 * state down in its destructor, then queues a range for a background
 * worker and unmaps a cached range.  Before exit the host memory monitor
 * deregisters an unmapped range through that backend, and a worker
 * registers through it; after the destructor neither may (exit_dep exits
 * 3 if one does).  Where the monitor cannot watch (libc cannot be
 * patched under a sanitizer's allocator) the workers alone are checked,
 * and the program says so.  The test is the program's exit status, so it
 * is no cmocka test; a hang is reported by alarm(). */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "exit_dep.h"

int main(void)
{
    alarm(60);
    const char *host = exit_dep_start();
    if (!host) {
        fprintf(stderr, "exit_dep_start failed\n");
        return 1;
    }
    if (strncmp(host, "host memory: monitored", 22) != 0) {
        printf("the monitor is not checked here: %s\n", host);
        return 0;
    }
    /* The monitor calls the backend while the process runs. */
    char *p = exit_dep_cached_range();
    if (!p || munmap(p, EXIT_DEP_LEN) != 0) {
        fprintf(stderr, "no cached range to unmap\n");
        return 1;
    }
    while (exit_dep_deregs() == 0)
        nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
    printf("the monitor deregistered an unmapped range; exiting\n");
    return 0;
}
