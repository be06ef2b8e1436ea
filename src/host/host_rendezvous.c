/* The record copies of the library find each other by (host_rendezvous.h).
 *
 * Version 1 of the record: the mark, the version and size, the state of
 * the owner's hooks, and the function that joins a copy's post.  Version 2
 * appends the function that joins a copy's begin and end as well.  A later
 * version may append fields, never move these; a copy reads only what its
 * own version knows and what `size` says is there. */
#include "host_rendezvous.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "resident.h"

enum state { INSTALLING, PROVEN, FAILED };

struct record {
    char mark[16];
    uint32_t version, size;
    _Atomic int state;
    int (*join)(struct record *self, rc_rendezvous_post post);
    /* Version 2. */
    int (*join_both)(struct record *self, rc_rendezvous_post post, rc_rendezvous_begin begin,
                     rc_rendezvous_end end);
};

static const char mark[16] = "regcache monitor";

/* A joined copy: `claimed` by the join that fills it, then `post`
 * published (release) once begin and end (NULL: a copy of version 1) are
 * there. */
struct peer {
    atomic_bool claimed;
    _Atomic(rc_rendezvous_post) post;
    _Atomic(rc_rendezvous_begin) begin;
    _Atomic(rc_rendezvous_end) end;
};

static struct peer peers[RC_RENDEZVOUS_PEERS];
static atomic_int n_peers;

/* The owner's side: a slot for the copy, once.  0, or -1 when full. */
static int join_peer(rc_rendezvous_post post, rc_rendezvous_begin begin, rc_rendezvous_end end)
{
    for (int i = 0; i < RC_RENDEZVOUS_PEERS; i++)
        if (atomic_load_explicit(&peers[i].post, memory_order_acquire) == post)
            return 0;
    for (int i = 0; i < RC_RENDEZVOUS_PEERS; i++) {
        struct peer *p = &peers[i];
        if (atomic_exchange_explicit(&p->claimed, true, memory_order_acq_rel))
            continue;
        atomic_store_explicit(&p->begin, begin, memory_order_relaxed);
        atomic_store_explicit(&p->end, end, memory_order_relaxed);
        atomic_store_explicit(&p->post, post, memory_order_release);
        atomic_fetch_add_explicit(&n_peers, 1, memory_order_release);
        return 0;
    }
    return -1;
}

static int join_v1(struct record *self, rc_rendezvous_post post)
{
    (void)self;
    return join_peer(post, NULL, NULL);
}

static int join_v2(struct record *self, rc_rendezvous_post post, rc_rendezvous_begin begin,
                   rc_rendezvous_end end)
{
    (void)self;
    return join_peer(post, begin, end);
}

static struct record mine = {
    .version = 2,
    .size = sizeof(struct record),
    .state = INSTALLING,
    .join = join_v1,
    .join_both = join_v2,
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

/* Whether record r, of whatever version, is large enough to hold `field`. */
#define HAS(r, field) ((r)->size >= offsetof(struct record, field) + sizeof(r)->field)

int rc_rendezvous_join(void *owner, const struct rc_rendezvous_peer *me)
{
    struct record *r = owner;
    if (!r || r == &mine || memcmp(r->mark, mark, sizeof mark) != 0 || r->version < 1 ||
        !HAS(r, join))
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
    /* The owner keeps pointers into this copy from now on. */
    rc_stay_resident();
    int rc = r->version >= 2 && HAS(r, join_both) ? r->join_both(r, me->post, me->begin, me->end)
                                                  : r->join(r, me->post);
    return rc == 0 ? 1 : 0;
}

void rc_rendezvous_forward_begin(uintptr_t start, uintptr_t end, struct rc_rendezvous_marks *m)
{
    m->begun = 0;
    if (atomic_load_explicit(&n_peers, memory_order_acquire) == 0)
        return;
    for (int i = 0; i < RC_RENDEZVOUS_PEERS; i++) {
        struct peer *p = &peers[i];
        rc_rendezvous_post post = atomic_load_explicit(&p->post, memory_order_acquire);
        if (!post)
            continue;
        rc_rendezvous_begin begin = atomic_load_explicit(&p->begin, memory_order_relaxed);
        if (begin) {
            m->token[i] = begin(start, end);
            m->begun |= 1u << i;
        } else {
            post(start, end);
        }
    }
}

/* A copy that began hears the end; any other (of version 1, or joined
 * meanwhile) a post, after the call as before it. */
void rc_rendezvous_forward_end(uintptr_t start, uintptr_t end, const struct rc_rendezvous_marks *m)
{
    if (atomic_load_explicit(&n_peers, memory_order_acquire) == 0)
        return;
    for (int i = 0; i < RC_RENDEZVOUS_PEERS; i++) {
        struct peer *p = &peers[i];
        rc_rendezvous_post post = atomic_load_explicit(&p->post, memory_order_acquire);
        if (!post)
            continue;
        if (m->begun & 1u << i)
            atomic_load_explicit(&p->end, memory_order_relaxed)(start, end, m->token[i]);
        else
            post(start, end);
    }
}
