/* Never a stale key: threads standing in for warps open hold sections,
 * look up random addresses of a set of buffers and use each key until
 * the section ends - or ask for a key outside the section (through the
 * ring when the table lacks it) and use it in the section if it is current
 * there - while another thread frees and reallocates those buffers (each
 * free told to the caches first, as the hooks do) and gets them again, and
 * a small budget evicts (also in the ring's reader).  Every registration's life is
 * logged on one clock (made, deregistered), and so is every buffer id.
 * Afterwards every key a lookup returned must name a registration that
 * covered the address, was made for the buffer id the address had during
 * the lookup (0 wrong), and was deregistered only after the section that
 * used it ended (0 stale).  While a buffer is between its free notice and
 * the allocation notice of its successor, no application owns it: a get
 * racing the free may register the old memory, and only the allocation
 * notice ends that, so either id is right then. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "keys_fixture.h"
#include "test_sync.h"

#define BUFFERS 16
#define WARPS 4
#define MAX_USES 200000
#define CHURN 1000
#define MAX_REGS (1 << 16)
#define MAX_IDS 4096

static atomic_uint_fast64_t tick;

static uint64_t now(void)
{
    return atomic_fetch_add(&tick, 1) + 1;
}

/* A registration's life: made at `made` for buffer id `id` over
 * [start, start+len), deregistered at `gone` (0: not yet). */
struct life {
    uintptr_t start;
    size_t len;
    uint64_t id;
    uint64_t made;
    _Atomic uint64_t gone;
};

static struct life lives[MAX_REGS];

static void on_reg(void *arg, struct fake_handle *h)
{
    (void)arg;
    if (h->serial >= MAX_REGS)
        abort(); /* called by the cache's threads: no cmocka there */
    struct life *l = &lives[h->serial];
    l->start = h->start;
    l->len = h->len;
    l->id = h->id;
    l->made = now();
}

static void on_dereg(void *arg, const struct fake_handle *h)
{
    (void)arg;
    atomic_store(&lives[h->serial].gone, now());
}

/* Buffer b's ids: id[b][n] from time from[b][n] (its predecessor's free
 * notice) until until[b][n] (its successor's allocation notice). */
static struct {
    uint64_t id[MAX_IDS], from[MAX_IDS], until[MAX_IDS];
    _Atomic int n;
} history[BUFFERS];

static void history_add(int b, uint64_t id, uint64_t from, uint64_t predecessor_until)
{
    int n = atomic_load(&history[b].n);
    if (n >= MAX_IDS)
        abort();
    if (n > 0)
        history[b].until[n - 1] = predecessor_until;
    history[b].id[n] = id;
    history[b].from[n] = from;
    history[b].until[n] = UINT64_MAX;
    atomic_store(&history[b].n, n + 1);
}

/* Could buffer b have had id at some time in [t0, t1]? */
static bool had_id(int b, uint64_t id, uint64_t t0, uint64_t t1)
{
    int n = atomic_load(&history[b].n);
    for (int i = 0; i < n; i++)
        if (history[b].id[i] == id && history[b].from[i] <= t1 && history[b].until[i] >= t0)
            return true;
    return false;
}

struct use {
    uint32_t lkey;
    int buffer;
    uintptr_t addr;
    uint64_t t0, t1, used; /* lookup began, ended; last use in the section */
};

struct warp {
    struct kx *k;
    unsigned slot;
    bool asks; /* through regcache_device_get_key() */
    uint32_t seed;
    struct use *uses;
    int n, answered;
};

static atomic_bool churn_done;
static atomic_long answers; /* keys from the host's answers, used */

/* Until the churn is done: sections of a few lookups each, whose keys are
 * held a while (as a work request in flight would) before the section
 * ends. */
static void look_up(struct warp *w)
{
    int confirm = regcache_device_hold_begin(&w->k->t, w->slot);
    int first = w->n;
    for (int j = 0; j < 8 && w->n < MAX_USES; j++) {
        int b = (int)(test_rand(&w->seed) % BUFFERS);
        uintptr_t addr = FX_ALLOC(b) + test_rand(&w->seed) % MiB;
        struct regcache_device_key key;
        uint64_t t0 = now();
        int rc = kx_lookup(w->k, addr, 1, 0, &key);
        uint64_t t1 = now();
        if (rc == REGCACHE_DEVICE_HIT && kx_key_good(w->k, confirm, &key))
            w->uses[w->n++] = (struct use){ key.lkey, b, addr, t0, t1, 0 };
    }
    for (volatile int spin = 0; spin < 2000; spin++)
        ;
    uint64_t used = now(); /* the keys' last use, before the section ends */
    for (int u = first; u < w->n; u++)
        w->uses[u].used = used;
    regcache_device_hold_end(&w->k->t, w->slot);
}

/* One key asked for outside the section, used in it if still current. */
static void ask(struct warp *w)
{
    int b = (int)(test_rand(&w->seed) % BUFFERS);
    uintptr_t addr = FX_ALLOC(b) + test_rand(&w->seed) % MiB;
    struct regcache_device_key key;
    uint64_t t0 = now();
    int rc = regcache_device_get_key(&w->k->t, (void *)addr, 1, 0, UINT64_C(1) << 40, &key);
    int confirm = regcache_device_hold_begin(&w->k->t, w->slot);
    if (rc == REGCACHE_DEVICE_HIT && kx_key_good(w->k, confirm, &key) && w->n < MAX_USES) {
        struct use *u = &w->uses[w->n++];
        *u = (struct use){ key.lkey, b, addr, t0, now(), 0 };
        w->answered += key.answered;
        atomic_fetch_add(&answers, key.answered);
        for (volatile int spin = 0; spin < 2000; spin++)
            ;
        u->used = now();
    }
    regcache_device_hold_end(&w->k->t, w->slot);
}

static void warp_main(void *arg)
{
    struct warp *w = arg;
    while (!atomic_load(&churn_done)) {
        if (w->asks)
            ask(w);
        else
            look_up(w);
    }
}

static void churn_main(void *arg)
{
    struct kx *k = arg;
    uint32_t seed = 4242;
    /* At least CHURN steps, and on until the ring has answered a miss that
     * a section then used: a churn that ends first (a fast run) would
     * leave the answers' path unproven. */
    for (int i = 0; i < CHURN || (atomic_load(&answers) == 0 && i < 1000 * CHURN); i++) {
        int b = (int)(test_rand(&seed) % BUFFERS);
        uintptr_t base = FX_ALLOC(b);
        if (test_rand(&seed) % 3 == 0) {
            uint64_t freeing = now();
            regcache_notify_free((void *)base, MiB);
            uint64_t id = fake_realloc(&k->fx.fb, base);
            regcache_notify_alloc((void *)base, MiB);
            history_add(b, id, freeing, now());
        }
        regcache_entry_t *e = NULL;
        if (regcache_get(k->fx.c, (void *)(base + test_rand(&seed) % MiB), 64, &e) == REGCACHE_OK)
            regcache_put(k->fx.c, e);
        if (test_rand(&seed) % 8 == 0)
            regcache_device_keys_sync(k->fx.c, 0);
    }
    atomic_store(&churn_done, true);
}

static void no_stale_no_wrong(void **state)
{
    struct kx *k = *state;
    k->fx.p.max_entries = BUFFERS / 2;
    k->kp.poll_ns = 2000;
    fx_device_allocs(&k->fx, BUFFERS);
    for (int b = 0; b < BUFFERS; b++) {
        atomic_store(&history[b].n, 0);
        history_add(b, fake_id_at(&k->fx.fb, FX_ALLOC(b)), 0, 0);
    }
    k->fx.fb.on_handle = on_reg;
    k->fx.fb.during_dereg = on_dereg;
    kx_attach(k);

    struct warp w[WARPS];
    struct dthread th[WARPS], churn;
    atomic_store(&churn_done, false);
    atomic_store(&answers, 0);
    for (int i = 0; i < WARPS; i++) {
        w[i] = (struct warp){
            .k = k, .slot = (unsigned)i, .asks = i >= WARPS / 2, .seed = 1u + (uint32_t)i * 7919
        };
        w[i].uses = calloc(MAX_USES, sizeof *w[i].uses);
        assert_non_null(w[i].uses);
        dthread_start(&th[i], warp_main, &w[i]);
    }
    dthread_start(&churn, churn_main, k);
    assert_true(dthread_join(&churn, 300));
    for (int i = 0; i < WARPS; i++)
        assert_true(dthread_join(&th[i], 300));
    regcache_destroy(k->fx.c); /* every life ends */
    k->fx.c = NULL;

    long hits = 0, stale = 0, wrong = 0, answered = 0;
    for (int i = 0; i < WARPS; i++) {
        answered += w[i].answered;
        for (int u = 0; u < w[i].n; u++) {
            const struct use *x = &w[i].uses[u];
            const struct life *l = &lives[x->lkey];
            hits++;
            if (x->lkey == 0 || x->lkey >= MAX_REGS || !l->made || x->addr < l->start ||
                x->addr >= l->start + l->len || !had_id(x->buffer, l->id, x->t0, x->t1)) {
                if (wrong++ < 5)
                    printf("wrong: key %u for %#jx (buffer %d) in [%ju, %ju]\n", x->lkey,
                           (uintmax_t)x->addr, x->buffer, (uintmax_t)x->t0, (uintmax_t)x->t1);
            } else if (atomic_load(&l->gone) < x->used) {
                if (stale++ < 5)
                    printf("stale: key %u deregistered at %ju, used until %ju\n", x->lkey,
                           (uintmax_t)atomic_load(&l->gone), (uintmax_t)x->used);
            }
        }
        free(w[i].uses);
    }
    printf("hits %ld (of them keys from answers %ld), registrations %ld, stale %ld, wrong %ld\n",
           hits, answered, atomic_load(&k->fx.fb.regs), stale, wrong);
    assert_true(hits > 0);
    assert_true(answered > 0);
    assert_int_equal(stale, 0);
    assert_int_equal(wrong, 0);
}

KX_MAIN(no_stale_no_wrong)
