/* One real cache in one process, for the tests in which several processes
 * share a GPU's BAR1 budget through the ledger: the public API over the
 * fake backend of tests/common, whose made-up allocations are device 0's,
 * validation TAG_CHECK, max_bytes 0 (the budget is REGCACHE_BAR1_BYTES less
 * the reserve, shared through the ledger unless REGCACHE_LEDGER=off).
 *
 *   cache_helper [STDERR_FILE]
 *
 * It creates the cache and holds a 1 MiB "anchor" entry for good (so that
 * `put` always has a hit to put, and the device has joined its ledger),
 * then answers "ready PID", or "error MESSAGE".  Then one command a line:
 *   reg N     a new N-MiB allocation: get (a miss) and put
 *   hold N    a new N-MiB allocation: get, kept held
 *   release   put every hold but the anchor
 *   put       get the anchor (a hit) and put it: a put, which answers
 *             pressure raised by other processes
 *   touch     get and put the newest allocation (a hit while it is cached)
 *   realloc   the newest allocation is freed and made again at the same
 *             address (a new buffer id), then touched: the hit's tag check
 *             drops the entry and a miss registers it again
 *   notify    regcache_notify_free() over the newest allocation
 *   fail      a new 1 MiB allocation whose registration fails (EINVAL)
 *   wait N    reg N, but the registration stops in the backend, after the
 *             cache made room for it, until a line "go": answers
 *             "registering" when it stops
 *   sleep MS
 *   fork      fork(); the child destroys its inherited cache, as the header
 *             says to, and exits; the parent waits for it
 * Each is answered "stats RC BYTES ENTRIES BUDGET HITS MISSES EVICTIONS TAG
 * NOTIFY FAILURES HELD": RC the command's REGCACHE_* status (the get's),
 * then device 0's regcache_get_device_stats() and the bytes held.  At end
 * of input it puts its holds and destroys the cache (with REGCACHE_STATS=1
 * printing its statistics to STDERR_FILE, if given). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_backend.h"
#include "regcache.h"

#define MiB ((size_t)1 << 20)
/* Allocations lie 1 GiB apart, so none shares a page with another. */
#define BASE ((uintptr_t)0x100000000000ull)
#define SPACING ((uintptr_t)1 << 30)
#define MAX_HOLDS 1024

static struct fake_backend fake;
static regcache_t *cache;
static int nallocs;
static uintptr_t newest_base;
static size_t newest_size;
static regcache_entry_t *holds[MAX_HOLDS];
static size_t hold_bytes[MAX_HOLDS];
static int nholds;

static void new_alloc(size_t mib)
{
    newest_base = BASE + (uintptr_t)nallocs++ * SPACING;
    newest_size = mib * MiB;
    fake_alloc(&fake, newest_base, newest_size, 0, REGCACHE_MEM_DEVICE);
}

/* Get the newest allocation whole; keep the hold or put it. */
static int get_newest(int keep)
{
    regcache_entry_t *e;
    int rc = regcache_get(cache, (void *)newest_base, newest_size, &e);
    if (rc != REGCACHE_OK)
        return rc;
    if (keep && nholds < MAX_HOLDS) {
        hold_bytes[nholds] = newest_size;
        holds[nholds++] = e;
    } else {
        regcache_put(cache, e);
    }
    return rc;
}

/* Put holds[from..]. */
static void release_from(int from)
{
    while (nholds > from)
        regcache_put(cache, holds[--nholds]);
}

/* Stops a registration in the backend until the test says "go". */
static void wait_for_go(void *arg)
{
    char line[16];
    (void)arg;
    fake.during_reg = NULL;
    printf("registering\n");
    if (!fgets(line, sizeof line, stdin) || strcmp(line, "go\n") != 0)
        abort();
}

static int command(const char *line)
{
    unsigned long n;
    if (sscanf(line, "reg %lu", &n) == 1 || sscanf(line, "hold %lu", &n) == 1) {
        new_alloc(n);
        return get_newest(line[0] == 'h');
    }
    if (sscanf(line, "wait %lu", &n) == 1) {
        new_alloc(n);
        fake.during_reg = wait_for_go;
        return get_newest(0);
    }
    if (sscanf(line, "sleep %lu", &n) == 1) {
        nanosleep(&(struct timespec){ .tv_sec = (time_t)(n / 1000),
                                      .tv_nsec = (long)(n % 1000) * 1000000 },
                  NULL);
        return REGCACHE_OK;
    }
    if (!strcmp(line, "fork\n")) {
        pid_t child = fork();
        if (child == 0) {
            regcache_destroy(cache);
            _exit(0);
        }
        int status;
        return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                       WEXITSTATUS(status) == 0
                   ? REGCACHE_OK
                   : 1;
    }
    if (!strcmp(line, "release\n")) {
        release_from(1);
        return REGCACHE_OK;
    }
    if (!strcmp(line, "put\n")) {
        regcache_entry_t *e;
        int rc = regcache_get(cache, (void *)BASE, MiB, &e);
        if (rc == REGCACHE_OK)
            regcache_put(cache, e);
        return rc;
    }
    if (!strcmp(line, "touch\n"))
        return get_newest(0);
    if (!strcmp(line, "realloc\n")) {
        fake_realloc(&fake, newest_base);
        return get_newest(0);
    }
    if (!strcmp(line, "notify\n")) {
        regcache_notify_free((void *)newest_base, newest_size);
        return REGCACHE_OK;
    }
    if (!strcmp(line, "fail\n")) {
        new_alloc(1);
        pthread_mutex_lock(&fake.lock);
        fake.fail_errno = EINVAL;
        fake.fail_count = 1;
        pthread_mutex_unlock(&fake.lock);
        return get_newest(0);
    }
    return 1; /* no REGCACHE_* status: the test sees an unknown command */
}

static void answer(int rc)
{
    struct regcache_stats s;
    size_t held = 0;
    regcache_get_device_stats(cache, 0, &s);
    for (int i = 0; i < nholds; i++)
        held += hold_bytes[i];
    printf("stats %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
           " %" PRIu64 " %" PRIu64 " %" PRIu64 " %zu\n",
           rc, s.bytes, s.entries, s.budget, s.hits, s.misses, s.evictions, s.invalidations_tag,
           s.invalidations_notify, s.reg_failures, held);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !freopen(argv[1], "w", stderr))
        return 2;
    fake_init(&fake);
    struct regcache_params p;
    fake_params(&fake, &p);
    p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    int rc = regcache_create(&p, &cache);
    if (rc == REGCACHE_OK) {
        new_alloc(1);
        rc = get_newest(1);
    }
    if (rc != REGCACHE_OK) {
        printf("error %s: %s\n", regcache_strerror(rc), regcache_last_error());
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    char line[128];
    while (fgets(line, sizeof line, stdin))
        answer(command(line));
    release_from(0);
    regcache_destroy(cache);
    return 0;
}
