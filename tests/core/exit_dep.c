/* A library that depends on libregcache (test_exit_callbacks.c): it keeps
 * a cache of host memory whose backend is its own code, and its destructor
 * tears down what that code uses.  A call of that backend that the
 * library's own threads (the host memory monitor, a background worker)
 * start after the destructor began fails the program: exit status 3, and
 * why on stderr. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "exit_dep.h"
#include "regcache.h"

static atomic_bool torn_down;
static atomic_int deregs;
static regcache_t *cache;
static char *left; /* a range still cached at exit */

static void check_alive(const char *what)
{
    if (!atomic_load(&torn_down))
        return;
    static const char says[] = "exit_dep: the backend's ";
    static const char after[] = " was called after the destructor\n";
    if (write(2, says, sizeof says - 1) < 0 || write(2, what, strlen(what)) < 0 ||
        write(2, after, sizeof after - 1) < 0) {
        /* exiting anyway */
    }
    _exit(3);
}

static int reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)arg, (void)addr, (void)len, (void)device, (void)rail;
    check_alive("reg");
    *handle = &deregs;
    return 0;
}

static void dereg(void *arg, void *handle)
{
    (void)arg, (void)handle;
    check_alive("dereg");
    atomic_fetch_add(&deregs, 1);
}

static struct regcache_backend backend = { .reg = reg, .dereg = dereg };

static char *cached_range(void)
{
    char *p = mmap(NULL, EXIT_DEP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    regcache_entry_t *e;
    if (p == MAP_FAILED || regcache_get(cache, p, EXIT_DEP_LEN, &e) != REGCACHE_OK)
        return NULL;
    regcache_put(cache, e);
    return p;
}

const char *exit_dep_start(void)
{
    struct regcache_params p;
    regcache_params_init(&p);
    p.backend = &backend;
    p.host_memory = 1;
    p.alignment = 4096;
    if (regcache_create(&p, &cache) != REGCACHE_OK)
        return NULL;
    left = cached_range();
    /* The workers start, with a first background registration. */
    char *q = mmap(NULL, EXIT_DEP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!left || q == MAP_FAILED || regcache_prefetch(cache, 0, q, EXIT_DEP_LEN) != REGCACHE_OK ||
        regcache_prefetch_wait(cache) != REGCACHE_OK)
        return NULL;
    const char *why = strstr(regcache_validation_reason(cache), "host memory: ");
    return why ? why : regcache_validation_reason(cache);
}

char *exit_dep_cached_range(void)
{
    return cached_range();
}

int exit_dep_deregs(void)
{
    return atomic_load(&deregs);
}

static void sleep_ms(long ms)
{
    struct timespec t = { .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 };
    while (nanosleep(&t, &t) != 0)
        continue;
}

/* Torn down: then a range queued for a worker, which it drops (the wait
 * ends once it did), and an unmap of the range still cached, which the
 * monitor hears of, with time for it to drain a few times over (it drains
 * every 50 ms while libc's hooks watch). */
__attribute__((destructor)) static void tear_down(void)
{
    if (!left)
        return;
    atomic_store(&torn_down, true);
    char *q = mmap(NULL, EXIT_DEP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q != MAP_FAILED && regcache_prefetch(cache, 0, q, EXIT_DEP_LEN) == REGCACHE_OK)
        regcache_prefetch_wait(cache);
    munmap(left, EXIT_DEP_LEN);
    sleep_ms(500);
}
