/* Debug builds (-DREGCACHE_DEBUG=ON) abort, saying why, on
 * a put that breaks the API's rules: an entry put to a cache it does not
 * come from, and a second put of the same get - for a hold in a slot and
 * a counted one (a thread's get beyond its slots).  Each misuse runs in a
 * child process that must die of SIGABRT after printing the message.
 *
 * The child is this binary executed afresh, not only forked: an empty slot
 * in a fork child may be a hold its parent took before the fork (the child
 * forgets those, and may still put them), so there a second put of a slot
 * hold cannot be told from that and is not reported. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "fake_backend.h"
#include "test_sync.h"

#define X ((uintptr_t)0x7f0000000000ull)

static struct fake_backend fb;

static regcache_t *new_cache(void)
{
    struct regcache_params p;
    regcache_t *c;
    fake_params(&fb, &p);
    if (regcache_create(&p, &c) != REGCACHE_OK)
        exit(2);
    return c;
}

static regcache_entry_t *get(regcache_t *c)
{
    regcache_entry_t *e;
    if (regcache_get(c, (const void *)X, 10, &e) != REGCACHE_OK)
        exit(2);
    return e;
}

/* A hold in a slot: a hit, once the entry is cached. */
static regcache_entry_t *get_hit(regcache_t *c)
{
    regcache_put(c, get(c));
    regcache_entry_t *e = get(c);
    if (!((uintptr_t)e & 1))
        exit(2);
    return e;
}

static regcache_entry_t *get_counted(regcache_t *c)
{
    regcache_entry_t *e = get_counted_hold(c, X, 10);
    if (!e)
        exit(2);
    return e;
}

static void misuse(const char *which)
{
    fake_init(&fb);
    fake_alloc(&fb, X, 1 << 20, 0, REGCACHE_MEM_DEVICE);
    regcache_t *c = new_cache(), *other = new_cache();
    if (!strcmp(which, "other-cache-hit")) {
        regcache_put(other, get_hit(c));
    } else if (!strcmp(which, "other-cache-counted")) {
        regcache_put(other, get_counted(c));
    } else if (!strcmp(which, "double-put-hit")) {
        regcache_entry_t *e = get_hit(c);
        regcache_put(c, e);
        regcache_put(c, e);
    } else if (!strcmp(which, "double-put-counted")) {
        regcache_entry_t *e = get_counted(c);
        regcache_put(c, e);
        regcache_put(c, e);
    } else {
        exit(3);
    }
    /* Not reached when the misuse is caught. */
    exit(0);
}

static void dies_saying(const char *which, const char *message)
{
    char out[4096];
    int status;
    if (!run_self(which, HANG_SECONDS, &status, out, sizeof(out)))
        fail_msg("%s: the child hung", which);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("%s: the child %s %d instead of aborting; it said \"%s\"", which,
                 WIFSIGNALED(status) ? "died of signal" : "exited with",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), out);
    if (!strstr(out, message))
        fail_msg("%s: the child aborted saying \"%s\", not \"%s\"", which, out, message);
}

static void put_to_another_cache_aborts(void **state)
{
    (void)state;
    dies_saying("other-cache-hit", "the entry belongs to another cache");
    dies_saying("other-cache-counted", "the entry belongs to another cache");
}

static void double_put_aborts(void **state)
{
    (void)state;
    dies_saying("double-put-hit", "the entry was already put (double put)");
    dies_saying("double-put-counted", "the entry was already put (double put)");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        misuse(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(put_to_another_cache_aborts),
        cmocka_unit_test(double_put_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
