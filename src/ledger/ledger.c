/* The shared BAR1 budget: attaching, publishing, fair shares and pressure
 * (see ledger.h). */
#include "ledger.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "last_error.h"
#include "ledger_segment.h"
#include "options.h"
#include "regcache.h"

/* How often, at most, a cache raising pressure looks for dead owners: each
 * look reads /proc once per record. */
#define SWEEP_INTERVAL_NS 100000000ull

struct rc_ledger {
    struct rc_ledger_pulse pulse; /* first: ledger.h reads it */
    struct rc_ledger_segment *seg;
    struct rc_ledger_record *rec; /* this cache's */
    uint64_t owner;               /* the owner word it carries */
    _Atomic uint64_t alone_at;    /* still_alone()'s */
    uint64_t pidns;               /* the pid namespace it can check owners in */
    pid_t pid;                    /* of the process that attached */
    char key[RC_LEDGER_KEY_MAX];  /* the GPU's, for messages */
    size_t fallback;              /* the budget to keep without a ledger */
    atomic_bool broken;           /* found corrupt: fallback from now on */
    char failure[320];            /* why, once `failed` is set */
    atomic_bool failed;
};

/* Numbers the caches of this process in their records. */
static atomic_uint_fast64_t attached;

static void store(_Atomic uint64_t *v, uint64_t value)
{
    atomic_store_explicit(v, value, memory_order_relaxed);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t clamp(uint64_t bytes)
{
    return bytes < RC_LEDGER_MAX_BYTES ? bytes : RC_LEDGER_MAX_BYTES;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* The policy                                                                */
/* ------------------------------------------------------------------------ */

/* The fair share when holdings over-fill the budget: the level L at which
 * sum(min(holding, L)) reaches it, so that caches holding less than L keep
 * all and the others share the rest.  Found by raising L from 0: each round
 * counts the holdings already under L as kept whole and spreads the rest
 * over the others; L only grows and stops within n + 2 rounds, when no
 * holding crosses it.  `extra` is one more holding beside v[0..n). */
static uint64_t water_level(uint64_t budget, const uint64_t *v, size_t n, uint64_t extra)
{
    uint64_t level = 0;
    for (;;) {
        uint64_t below = 0, above = 0;
        for (size_t i = 0; i <= n; i++) {
            uint64_t x = i < n ? v[i] : extra;
            if (x <= level)
                below = add_sat(below, x);
            else
                above++;
        }
        if (!above || below > budget)
            return level;
        uint64_t next = (budget - below) / above;
        if (next <= level)
            return level;
        level = next;
    }
}

/* rc_ledger_plan() with `rest`, the sum of others[0..n), already added up
 * by the caller's scan. */
static struct rc_ledger_plan plan(uint64_t budget, const uint64_t *others, size_t n, uint64_t rest,
                                  uint64_t own, uint64_t want)
{
    uint64_t demand = add_sat(own, want);
    /* Room on the GPU: keep what is held and grow into the room. */
    if (add_sat(rest, demand) <= budget)
        return (struct rc_ledger_plan){ .keep = budget - rest - want };
    /* Alone, the level is the budget: water_level() would find so in two
     * rounds of divisions, at every miss of a full GPU. */
    uint64_t level = n ? water_level(budget, others, n, demand) : budget;
    uint64_t keep = level > want ? level - want : 0;
    uint64_t after = add_sat(add_sat(rest, own < keep ? own : keep), want);
    return (struct rc_ledger_plan){ .keep = keep, .pressure = want && after > budget };
}

struct rc_ledger_plan rc_ledger_plan(uint64_t budget, const uint64_t *others, size_t n,
                                     uint64_t own, uint64_t want)
{
    uint64_t rest = 0;
    for (size_t i = 0; i < n; i++)
        rest = add_sat(rest, others[i]);
    return plan(budget, others, n, rest, own, want);
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t records_used(const struct rc_ledger_segment *s)
{
    uint64_t used = rc_ledger_read(&s->hdr.used);
    return used < RC_LEDGER_RECORDS ? used : RC_LEDGER_RECORDS;
}

/* Take back the records of owners that are definitely gone (pid reuse
 * included: the start time differs), claims cut short by a death
 * included.  Returns how many records are left in use. */
static unsigned sweep(struct rc_ledger_segment *s, uint64_t pidns)
{
    unsigned live = 0;
    for (uint64_t i = 0, used = records_used(s); i < used; i++) {
        struct rc_ledger_record *r = &s->rec[i];
        uint64_t owner = atomic_load_explicit(&r->owner, memory_order_acquire);
        if (!owner)
            continue;
        /* The CAS fails when the owner word moved since it was judged (a
         * claim settled, or another sweep took it back). */
        if (rc_ledger_owner_state(r, owner, pidns) == RC_LEDGER_GONE &&
            atomic_compare_exchange_strong(&r->owner, &owner, 0))
            continue;
        live++;
    }
    return live;
}

/* At most one process per interval sweeps on pressure. */
static void sweep_now_and_then(struct rc_ledger_segment *s, uint64_t pidns)
{
    uint64_t now = now_ns(), last = rc_ledger_read(&s->hdr.swept);
    if ((now - last < SWEEP_INTERVAL_NS && last <= now) ||
        !atomic_compare_exchange_strong(&s->hdr.swept, &last, now))
        return;
    sweep(s, pidns);
}

static void process_name(uint64_t comm[2])
{
    char name[16] = "";
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, name, sizeof name);
        close(fd);
        if (n > 0 && name[n - 1] == '\n')
            name[n - 1] = '\0';
    }
    memcpy(comm, name, sizeof name);
}

void (*rc_ledger_claiming)(void);

/* Claim a free record: marked CLAIMING while the previous owner's values are
 * cleared, so that no reader ever adds them to this owner.  The claim word
 * carries what a sweep needs to judge this process until its pidns field
 * is written, should it die meanwhile. */
static struct rc_ledger_record *claim(struct rc_ledger_segment *s, uint64_t owner, uint64_t pidns)
{
    for (unsigned i = 0; i < RC_LEDGER_RECORDS; i++) {
        struct rc_ledger_record *r = &s->rec[i];
        uint64_t free_word = 0;
        if (rc_ledger_read(&r->owner) ||
            !atomic_compare_exchange_strong(&r->owner, &free_word,
                                            rc_ledger_claim_word(owner, pidns)))
            continue;
        uint64_t used = rc_ledger_read(&s->hdr.used);
        while (used <= i && !atomic_compare_exchange_weak(&s->hdr.used, &used, i + 1)) {
        }
        if (rc_ledger_claiming)
            rc_ledger_claiming();
        uint64_t comm[2];
        process_name(comm);
        store(&r->pidns, pidns);
        store(&r->cache, atomic_fetch_add(&attached, 1) + 1);
        store(&r->comm[0], comm[0]);
        store(&r->comm[1], comm[1]);
        _Atomic uint64_t *zero[] = { &r->bytes,     &r->entries,      &r->budget,
                                     &r->hits,      &r->misses,       &r->evictions,
                                     &r->inval_tag, &r->inval_notify, &r->reg_failures };
        for (size_t k = 0; k < sizeof zero / sizeof zero[0]; k++)
            store(zero[k], 0);
        atomic_store_explicit(&r->owner, owner, memory_order_release);
        /* After the owner word: a cache that reads the new count reads the
         * records again and finds this one. */
        atomic_fetch_add_explicit(&s->hdr.claims, 1, memory_order_release);
        return r;
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Attaching                                                                 */
/* ------------------------------------------------------------------------ */

static int no_ledger(const char *gpu_key, const char *why)
{
    rc_set_error("no shared BAR1 budget for GPU %s (%s): this cache keeps its own", gpu_key, why);
    return REGCACHE_ERR_UNSUPPORTED;
}

int rc_ledger_attach(const char *gpu_key, size_t budget, enum rc_budget_source source,
                     struct rc_ledger **out)
{
    *out = NULL;
    char why[256], prefix[RC_LEDGER_PREFIX_MAX], name[RC_LEDGER_NAME_MAX];
    bool on;
    if (!rc_option_ledger(&on, why, sizeof why))
        return no_ledger(gpu_key, why);
    if (!on)
        return no_ledger(gpu_key, "REGCACHE_LEDGER=off");
    if (!rc_ledger_key_ok(gpu_key))
        return no_ledger(gpu_key, "the GPU key is not a name");
    if (!rc_ledger_prefix(prefix, sizeof prefix, why, sizeof why))
        return no_ledger(gpu_key, why);
    snprintf(name, sizeof name, "/%s%s", prefix, gpu_key);
    uint64_t owner = rc_ledger_self(), pidns = rc_ledger_pid_namespace();
    if (!owner || !pidns)
        return no_ledger(gpu_key, "/proc does not tell this process's start time");

    struct rc_ledger *l = calloc(1, sizeof *l);
    if (!l) {
        rc_set_error("out of memory attaching to the BAR1 ledger");
        return REGCACHE_ERR_NO_MEMORY;
    }
    l->seg = rc_ledger_map(name, gpu_key, why, sizeof why);
    if (!l->seg) {
        free(l);
        return no_ledger(gpu_key, why);
    }
    struct rc_ledger_header *h = &l->seg->hdr;
    unsigned live = sweep(l->seg, pidns);
    store(&h->swept, now_ns());
    /* Alone on the GPU, this process's reading of free BAR1 is the GPU's
     * budget; with others attached it lacks what they registered. */
    if (budget && (!live || !rc_ledger_read(&h->budget))) {
        store(&h->budget_source, (uint64_t)source);
        store(&h->budget, clamp(budget));
    }
    l->rec = claim(l->seg, owner, pidns);
    if (!l->rec) {
        rc_ledger_unmap(l->seg);
        free(l);
        snprintf(why, sizeof why, "all %u records of %s%s are in use", RC_LEDGER_RECORDS,
                 RC_LEDGER_DIR, name);
        return no_ledger(gpu_key, why);
    }
    l->owner = owner;
    l->pidns = pidns;
    l->pid = getpid();
    snprintf(l->key, sizeof l->key, "%s", gpu_key);
    l->fallback = budget;
    l->pulse.pressure = &h->pressure;
    store(&l->pulse.seen, rc_ledger_read(&h->pressure));
    *out = l;
    return REGCACHE_OK;
}

void rc_ledger_detach(struct rc_ledger *l)
{
    if (!l)
        return;
    /* A fork child maps the parent's segment but owns none of its records;
     * a corrupt segment is left as it is. */
    uint64_t owner = l->owner;
    if (getpid() == l->pid && !atomic_load(&l->broken))
        atomic_compare_exchange_strong(&l->rec->owner, &owner, 0);
    rc_ledger_unmap(l->seg);
    free(l);
}

/* ------------------------------------------------------------------------ */
/* Publishing and asking                                                     */
/* ------------------------------------------------------------------------ */

static bool broken(struct rc_ledger *l)
{
    return atomic_load_explicit(&l->broken, memory_order_relaxed);
}

void rc_ledger_usage(struct rc_ledger *l, size_t bytes, size_t entries)
{
    if (broken(l))
        return;
    /* Stored as they are: entries change with nearly every call, and share
     * the line with bytes. */
    struct rc_ledger_record *r = l->rec;
    store(&r->bytes, clamp(bytes));
    store(&r->entries, clamp(entries));
}

void rc_ledger_publish(struct rc_ledger *l, const struct rc_ledger_counts *c)
{
    if (broken(l))
        return;
    struct rc_ledger_record *r = l->rec;
    store(&r->hits, c->hits);
    store(&r->misses, c->misses);
    store(&r->evictions, c->evictions);
    store(&r->inval_tag, c->inval_tag);
    store(&r->inval_notify, c->inval_notify);
    store(&r->reg_failures, c->reg_failures);
}

/* What the cache would keep before registering `want` without a ledger:
 * as much as leaves room for it within its own budget. */
static size_t own_budget(const struct rc_ledger *l, size_t want)
{
    if (!l->fallback)
        return SIZE_MAX;
    return l->fallback > want ? l->fallback - want : 0;
}

/* The first time the ledger reads wrong: stop writing to it, say why (to
 * the caller, and to the REGCACHE_STATS dump through rc_ledger_failure()),
 * and keep this process's own budget from then on.  A segment truncated
 * under the mapping reads RC_LEDGER_CUT (ledger_guard.h). */
static size_t fall_back(struct rc_ledger *l, const char *why, size_t want)
{
    if (!atomic_exchange(&l->broken, true)) {
        if (l->seg->hdr.magic == RC_LEDGER_CUT)
            snprintf(l->failure, sizeof l->failure,
                     "the BAR1 ledger of GPU %s was truncated by another process while in use: "
                     "this cache keeps its own budget",
                     l->key);
        else
            snprintf(l->failure, sizeof l->failure,
                     "the BAR1 ledger of GPU %s is corrupt (%s): this cache keeps its own budget",
                     l->key, why);
        rc_set_error("%s", l->failure);
        atomic_store_explicit(&l->failed, true, memory_order_release);
    }
    return own_budget(l, want);
}

const char *rc_ledger_failure(const struct rc_ledger *l)
{
    return atomic_load_explicit(&l->failed, memory_order_acquire) ? l->failure : NULL;
}

/* Whether a record is possible at a glance: an owner with a pid, counts
 * below RC_LEDGER_MAX_BYTES.  A miss of a cache that shares the ledger
 * reads every record, and rc_ledger_check_record(), out of line with its
 * table of counts, costs several times this; it is left to decide the
 * rest (a count of exactly the limit, which clamping writes, passes) and
 * to say what is wrong. */
static bool plainly_possible(uint64_t owner, uint64_t bytes, const struct rc_ledger_record *r)
{
    return rc_ledger_owner_pid(owner) &&
           (bytes | rc_ledger_read(&r->entries) | rc_ledger_read(&r->budget)) < RC_LEDGER_MAX_BYTES;
}

/* Every other live cache's bytes into others[] and their sum into *rest,
 * this cache's into *own.  false with *why filled when the segment holds
 * what cannot be. */
static bool read_holdings(struct rc_ledger *l, uint64_t *others, size_t *n, uint64_t *rest,
                          uint64_t *own, char *why, size_t why_len)
{
    const struct rc_ledger_segment *s = l->seg;
    uint64_t used = rc_ledger_read(&s->hdr.used);
    if (s->hdr.magic != RC_LEDGER_MAGIC) {
        snprintf(why, why_len, "bad magic %#llx", (unsigned long long)s->hdr.magic);
        return false;
    }
    if (used > RC_LEDGER_RECORDS) {
        snprintf(why, why_len, "%llu records in use of %u", (unsigned long long)used,
                 RC_LEDGER_RECORDS);
        return false;
    }
    if (rc_ledger_read(&l->rec->owner) != l->owner) {
        snprintf(why, why_len, "this cache's record was taken over");
        return false;
    }
    *n = 0;
    *rest = 0;
    for (unsigned i = 0; i < used; i++) {
        const struct rc_ledger_record *r = &s->rec[i];
        uint64_t owner = atomic_load_explicit(&r->owner, memory_order_acquire);
        if (!owner || (owner & RC_LEDGER_CLAIMING))
            continue;
        uint64_t bytes = rc_ledger_read(&r->bytes);
        if (!plainly_possible(owner, bytes, r) && !rc_ledger_check_record(s, i, why, why_len))
            return false;
        if (r == l->rec) {
            *own = bytes;
        } else {
            others[(*n)++] = bytes;
            *rest = add_sat(*rest, bytes);
        }
    }
    return true;
}

/* Whether the last look at the records found no other cache and none has
 * claimed a record since (alone_at: the segment's `claims` + 1 as of that
 * look, 0 when it found others): then this cache's own bytes are all it
 * needs.  The header and the owner of its record are checked as every look
 * checks them, so that a segment that turns corrupt there is given up at
 * the next miss all the same; what only a writer other than this library
 * puts into the records is found at the next look. */
static bool still_alone(const struct rc_ledger *l, uint64_t claims)
{
    const struct rc_ledger_segment *s = l->seg;
    return rc_ledger_read(&l->alone_at) == claims + 1 && s->hdr.magic == RC_LEDGER_MAGIC &&
           rc_ledger_read(&s->hdr.used) <= RC_LEDGER_RECORDS &&
           rc_ledger_read(&l->rec->owner) == l->owner;
}

/* Other caches must make room for this one's registration.  Rare: out of
 * line. */
static __attribute__((noinline)) void raise_pressure(struct rc_ledger *l)
{
    uint64_t before = atomic_fetch_add_explicit(&l->seg->hdr.pressure, 1, memory_order_release);
    /* This cache is the one that needs room: it need not answer its own
     * pressure, only pressure raised by others. */
    atomic_compare_exchange_strong(&l->pulse.seen, &before, before + 1);
    sweep_now_and_then(l->seg, l->pidns);
}

/* rc_ledger_limit() once the holdings are known.  Inline: a cache alone on
 * a GPU of unknown budget has nothing else to do. */
static inline size_t limit_of(struct rc_ledger *l, const uint64_t *others, size_t n, uint64_t rest,
                              uint64_t own, uint64_t want)
{
    uint64_t budget = rc_ledger_read(&l->seg->hdr.budget);
    if (!budget)
        return SIZE_MAX;
    struct rc_ledger_plan p = plan(budget, others, n, rest, own, want);
    /* Mostly as it was: a put that answers pressure with nothing to evict
     * then leaves the line clean, where a store would take it from every
     * process that read it since. */
    uint64_t limit = clamp(add_sat(p.keep, want));
    if (rc_ledger_read(&l->rec->budget) != limit)
        store(&l->rec->budget, limit);
    if (want) {
        /* Count the registration before it happens, so that caches acting
         * on this pressure, and concurrent misses, see it;
         * rc_ledger_usage() puts the truth in its place. */
        store(&l->rec->bytes, clamp(add_sat(own < p.keep ? own : p.keep, want)));
    }
    if (p.pressure)
        raise_pressure(l);
    return (size_t)p.keep;
}

/* rc_ledger_limit() from a look at every record, which also tells whether
 * the next call may skip it.  Out of line: alone, a cache comes here only
 * after a claim. */
static __attribute__((noinline)) size_t look_and_limit(struct rc_ledger *l, size_t want,
                                                       uint64_t claims)
{
    uint64_t others[RC_LEDGER_RECORDS], rest, own = 0;
    size_t n;
    char why[160];
    if (!read_holdings(l, others, &n, &rest, &own, why, sizeof why))
        return fall_back(l, why, want);
    atomic_store_explicit(&l->alone_at, n ? 0 : claims + 1, memory_order_relaxed);
    return limit_of(l, others, n, rest, own, want);
}

size_t rc_ledger_limit(struct rc_ledger *l, size_t want)
{
    if (broken(l))
        return own_budget(l, want);
    /* Before the records are read, so that a claim after it counts. */
    uint64_t claims = atomic_load_explicit(&l->seg->hdr.claims, memory_order_acquire);
    if (!still_alone(l, claims))
        return look_and_limit(l, want, claims);
    return limit_of(l, NULL, 0, 0, rc_ledger_read(&l->rec->bytes), want);
}

bool rc_ledger_pressed(struct rc_ledger *l)
{
    uint64_t seen = atomic_load_explicit(&l->pulse.seen, memory_order_relaxed);
    uint64_t now = atomic_load_explicit(l->pulse.pressure, memory_order_acquire);
    return now != seen && atomic_compare_exchange_strong(&l->pulse.seen, &seen, now);
}
