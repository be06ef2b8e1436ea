/* The record copies of the library find each other by (host_rendezvous.h).
 *
 * Version 1 of the record: the mark, the version and size, the state of
 * the owner's hooks, and the function that joins a copy.  A later version
 * may append fields, never move these; a copy reads only what its own
 * version knows and what `size` says is there. */
#include "host_rendezvous.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "resident.h"

enum state { INSTALLING, PROVEN, FAILED };

/* Copies one owner hands ranges to: one per library that embeds regcache
 * beside the owner. */
#define PEERS 16

struct record {
    char mark[16];
    uint32_t version, size;
    _Atomic int state;
    int (*join)(struct record *self, rc_rendezvous_post post);
};

static const char mark[16] = "regcache monitor";

static _Atomic(rc_rendezvous_post) peers[PEERS];
static atomic_int n_peers;

/* The owner's side: a slot for post, once.  0, or -1 when full. */
static int join_me(struct record *self, rc_rendezvous_post post)
{
    (void)self;
    for (int i = 0; i < PEERS; i++) {
        rc_rendezvous_post none = NULL;
        if (atomic_load_explicit(&peers[i], memory_order_acquire) == post)
            return 0;
        if (atomic_compare_exchange_strong_explicit(&peers[i], &none, post, memory_order_release,
                                                    memory_order_relaxed)) {
            atomic_fetch_add_explicit(&n_peers, 1, memory_order_release);
            return 0;
        }
    }
    return -1;
}

static struct record mine = {
    .version = 1,
    .size = sizeof(struct record),
    .state = INSTALLING,
    .join = join_me,
};

void *rc_rendezvous_mine(void)
{
    memcpy(mine.mark, mark, sizeof mark); /* before anyone can see it */
    return &mine;
}

void rc_rendezvous_settle(bool proven)
{
    atomic_store_explicit(&mine.state, proven ? PROVEN : FAILED, memory_order_release);
}

int rc_rendezvous_join(void *owner, rc_rendezvous_post post)
{
    struct record *r = owner;
    if (!r || r == &mine || memcmp(r->mark, mark, sizeof mark) != 0 || r->version < 1 ||
        r->size < offsetof(struct record, join) + sizeof r->join)
        return -1;
    /* The owner's self-test takes milliseconds; ten seconds is a hung
     * owner. */
    struct timespec nap = { 0, 1000000 };
    int state = atomic_load_explicit(&r->state, memory_order_acquire);
    for (int waited = 0; state == INSTALLING && waited < 10000; waited++) {
        nanosleep(&nap, NULL);
        state = atomic_load_explicit(&r->state, memory_order_acquire);
    }
    if (state != PROVEN)
        return 0;
    /* The owner keeps a pointer into this copy from now on. */
    rc_stay_resident();
    return r->join(r, post) == 0 ? 1 : 0;
}

void rc_rendezvous_forward(uintptr_t start, uintptr_t end)
{
    if (atomic_load_explicit(&n_peers, memory_order_acquire) == 0)
        return;
    for (int i = 0; i < PEERS; i++) {
        rc_rendezvous_post post = atomic_load_explicit(&peers[i], memory_order_acquire);
        if (post)
            post(start, end);
    }
}
