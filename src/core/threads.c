/* Per-thread records (see threads.h). */
#include "threads.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "asym_fence.h"
#include "entry.h"
#include "resident.h"

__thread struct rc_thread *rc_thread_current __attribute__((tls_model("initial-exec")));

static _Atomic(struct rc_thread *) all_records;

/* The live records: the first live_count slots of a grow-only array;
 * writers hold live_lock, readers take nothing.  Arrays outgrown stay
 * allocated, so that a scanner never reads freed memory: they double, so
 * there are few. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct rc_thread *_Atomic *) live_slots;
static atomic_size_t live_count, live_cap;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static atomic_uint hit_ids; /* bit i: hit id i is taken */
/* Scans of holds since the last look for idle records: a heuristic count,
 * whose lost increments only delay a look. */
static atomic_uint scans;

/* Records per mmap(): a chunk is about 170 KiB. */
#define CHUNK 16

static bool holds_nothing(const struct rc_thread *t)
{
    for (int i = 0; i < RC_HOLD_SLOTS; i++)
        if (atomic_load_explicit(&((struct rc_thread *)t)->holds[i], memory_order_relaxed))
            return false;
    return true;
}

/* Under live_lock. */
static bool live_add_locked(struct rc_thread *t)
{
    struct rc_thread *_Atomic *slots = atomic_load_explicit(&live_slots, memory_order_relaxed);
    size_t n = atomic_load_explicit(&live_count, memory_order_relaxed);
    for (size_t i = 0; i < n; i++)
        if (atomic_load_explicit(&slots[i], memory_order_relaxed) == t)
            return true; /* kept live by holds that outlived its last thread */
    size_t cap = atomic_load_explicit(&live_cap, memory_order_relaxed);
    if (n == cap) {
        size_t grown = cap ? 2 * cap : 64;
        struct rc_thread *_Atomic *more = mmap(NULL, grown * sizeof(*more), PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (more == MAP_FAILED)
            return false;
        for (size_t i = 0; i < n; i++)
            atomic_init(&more[i], atomic_load_explicit(&slots[i], memory_order_relaxed));
        atomic_store_explicit(&live_slots, more, memory_order_seq_cst);
        atomic_store_explicit(&live_cap, grown, memory_order_relaxed);
        slots = more;
    }
    atomic_store_explicit(&slots[n], t, memory_order_seq_cst);
    atomic_store_explicit(&live_count, n + 1, memory_order_seq_cst);
    return true;
}

static void live_remove_locked(struct rc_thread *t)
{
    struct rc_thread *_Atomic *slots = atomic_load_explicit(&live_slots, memory_order_relaxed);
    size_t n = atomic_load_explicit(&live_count, memory_order_relaxed);
    size_t i = 0;
    while (i < n && atomic_load_explicit(&slots[i], memory_order_relaxed) != t)
        i++;
    if (i == n)
        return; /* parked, or left before */
    /* The last record fills the hole, so that a scan costs the records in
     * the array and nothing for those that left: without this, a pool of
     * 32 threads that once used the cache together made each evicting miss
     * about 220 instructions dearer for the rest of the process.  It is
     * stored in the hole before its old slot empties, and visits read
     * from the end down, so a visit meets it in one place or the other
     * (or both).  Release: a scanner that reads the hole, or the lower
     * count, has this record's last puts (and their reads of the entries
     * they held) ordered before whatever it then does to those entries. */
    struct rc_thread *last = atomic_load_explicit(&slots[n - 1], memory_order_relaxed);
    if (i != n - 1)
        atomic_store_explicit(&slots[i], last, memory_order_seq_cst);
    atomic_store_explicit(&slots[n - 1], NULL, memory_order_seq_cst);
    atomic_store_explicit(&live_count, n - 1, memory_order_seq_cst);
}

size_t rc_thread_live_span(void)
{
    return atomic_load_explicit(&live_count, memory_order_relaxed);
}

bool rc_thread_visit(bool (*fn)(struct rc_thread *t, void *arg), void *arg)
{
    /* The count first: an array published after it holds at least as many
     * slots (arrays only grow, and growth copies before publishing).  From
     * the end down: a record that moves, moves down (live_remove_locked). */
    size_t count = atomic_load_explicit(&live_count, memory_order_seq_cst);
    struct rc_thread *_Atomic *slots = atomic_load_explicit(&live_slots, memory_order_seq_cst);
    for (size_t i = count; slots && i-- > 0;) {
        struct rc_thread *t = atomic_load_explicit(&slots[i], memory_order_acquire);
        if (t && fn(t, arg))
            return true;
    }
    return false;
}

static void release_record(void *arg)
{
    struct rc_thread *t = arg;
    /* A regcache call from a later TLS destructor attaches afresh rather
     * than writing into a record another thread may own by then. */
    rc_thread_current = NULL;
    t->hint = 0;
    /* A hold still out (put later by another thread) keeps it scanned;
     * without one, nothing of the exited thread can be held. */
    pthread_mutex_lock(&live_lock);
    if (holds_nothing(t))
        live_remove_locked(t);
    pthread_mutex_unlock(&live_lock);
    atomic_store_explicit(&t->in_use, false, memory_order_release);
}

/* Only the forking thread lives on in the child: every other record is
 * free again, and no hold from before the fork means anything here (the
 * inherited caches refuse all work; see src/registry). */
static void forget_parent_threads(void)
{
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next) {
        for (int i = 0; i < RC_HOLD_SLOTS; i++)
            atomic_store_explicit(&t->holds[i], 0, memory_order_relaxed);
        if (t == rc_thread_current)
            continue;
        for (int d = 0; d < RC_WALK_DEPTH; d++)
            atomic_store_explicit(&t->walk_at[d], 0, memory_order_relaxed);
        t->walk_depth = 0;
        atomic_store_explicit(&t->in_use, false, memory_order_relaxed);
        live_remove_locked(t);
    }
    /* The lock may have been held by a parent thread at fork time. */
    pthread_mutex_init(&live_lock, NULL);
}

static void make_exit_key(void)
{
    /* The key's destructor runs at every later thread exit, also after the
     * library was dlclose()d. */
    rc_stay_resident();
    pthread_key_create(&exit_key, release_record);
    pthread_atfork(NULL, NULL, forget_parent_threads);
}

struct rc_thread *rc_thread_first(void)
{
    return atomic_load_explicit(&all_records, memory_order_acquire);
}

static void publish(struct rc_thread *t)
{
    struct rc_thread *head = atomic_load_explicit(&all_records, memory_order_relaxed);
    do {
        t->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&all_records, &head, t, memory_order_release,
                                                    memory_order_relaxed));
}

static struct rc_thread *claim_free(void)
{
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next) {
        bool used = false;
        if (!atomic_load_explicit(&t->in_use, memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(&t->in_use, &used, true, memory_order_acquire,
                                                    memory_order_relaxed))
            return t;
    }
    return NULL;
}

/* mmap rather than malloc: a thread's first call may come from a free hook
 * that runs inside the allocator. */
static struct rc_thread *new_chunk(void)
{
    struct rc_thread *chunk = mmap(NULL, CHUNK * sizeof(*chunk), PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (chunk == MAP_FAILED)
        return NULL;
    atomic_store_explicit(&chunk[0].in_use, true, memory_order_relaxed);
    for (int i = CHUNK - 1; i >= 0; i--)
        publish(&chunk[i]);
    return &chunk[0];
}

struct rc_thread *rc_thread_attach(void)
{
    pthread_once(&exit_key_once, make_exit_key);
    struct rc_thread *t = claim_free();
    if (!t)
        t = new_chunk();
    if (!t)
        return NULL;
    if (!rc_thread_unpark(t)) {
        atomic_store_explicit(&t->in_use, false, memory_order_release);
        return NULL;
    }
    pthread_setspecific(exit_key, t);
    rc_thread_current = t;
    return t;
}

bool rc_thread_unpark(struct rc_thread *t)
{
    pthread_mutex_lock(&live_lock);
    bool live = live_add_locked(t);
    if (live)
        atomic_store_explicit(&t->parked, false, memory_order_seq_cst);
    pthread_mutex_unlock(&live_lock);
    return live;
}

/* Has t held nothing and logged no put since the last look?  Under
 * live_lock; remembers what it saw for the next look. */
static bool idle_since_last_look(struct rc_thread *t)
{
    unsigned pos = atomic_load_explicit(&t->use_pos, memory_order_relaxed);
    bool idle = pos == t->parked_pos && holds_nothing(t);
    t->parked_pos = pos;
    return idle;
}

/* Take the records that idled since the last look out of the live array.
 * Mark them, fence so that every thread's slot stores before it are seen
 * (a hold published after it reads the mark after its own fence, and
 * brings its record back: rc_thread_parked()), then drop those still
 * holding nothing.  From the end down, as removal moves the last record
 * into the hole.  Not the caller's own: it is evicting, not idle.  Out of
 * line: its frame would cost every scan of the holds that skips it. */
static __attribute__((noinline)) void park_idle(void)
{
    if (pthread_mutex_trylock(&live_lock))
        return; /* another thread is attaching or parking: next time */
    struct rc_thread *_Atomic *slots = atomic_load_explicit(&live_slots, memory_order_relaxed);
    size_t n = atomic_load_explicit(&live_count, memory_order_relaxed), marked = 0;
    for (size_t i = 0; i < n; i++) {
        struct rc_thread *t = atomic_load_explicit(&slots[i], memory_order_relaxed);
        if (t != rc_thread_current && idle_since_last_look(t)) {
            atomic_store_explicit(&t->parked, true, memory_order_seq_cst);
            marked++;
        }
    }
    if (marked) {
        rc_fence_heavy();
        for (size_t i = n; i-- > 0;) {
            struct rc_thread *t = atomic_load_explicit(&slots[i], memory_order_relaxed);
            if (!rc_thread_parked(t))
                continue;
            if (holds_nothing(t))
                live_remove_locked(t);
            else
                atomic_store_explicit(&t->parked, false, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&live_lock);
}

static bool holds(struct rc_thread *t, void *e)
{
    /* Every claim scans every live record's slots: unrolled, a slot costs
     * a load, a mask and a compare. */
#pragma GCC unroll 8
    for (int i = 0; i < RC_HOLD_SLOTS; i++)
        /* Acquire: a holder's reads of the entry happen before its release
         * of the slot, and so before whatever the caller does to an entry
         * it finds unheld. */
        if ((atomic_load_explicit(&t->holds[i], memory_order_acquire) & ~RC_HOLD_RAIL_MASK) ==
            (uintptr_t)e)
            return true;
    return false;
}

bool rc_thread_holds(const struct regcache_entry *e)
{
    unsigned n = atomic_load_explicit(&scans, memory_order_relaxed) + 1;
    atomic_store_explicit(&scans, n, memory_order_relaxed);
    if (n % RC_PARK_EVERY == 0)
        park_idle();
    return rc_thread_visit(holds, (void *)e);
}

void rc_thread_forget_holds(bool (*owns)(const void *arg, const void *entry), const void *arg)
{
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next)
        for (int i = 0; i < RC_HOLD_SLOTS; i++) {
            uintptr_t v = atomic_load_explicit(&t->holds[i], memory_order_acquire);
            if (v && owns(arg, (const void *)(v & ~RC_HOLD_RAIL_MASK)))
                atomic_compare_exchange_strong_explicit(&t->holds[i], &v, 0, memory_order_release,
                                                        memory_order_relaxed);
        }
    /* Records that only these holds kept live, their threads gone, leave
     * the scan: as release_record() would have at their thread's exit. */
    pthread_mutex_lock(&live_lock);
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next)
        if (!atomic_load_explicit(&t->in_use, memory_order_acquire) && holds_nothing(t))
            live_remove_locked(t);
    pthread_mutex_unlock(&live_lock);
}

int rc_thread_claim_hit_id(void)
{
    unsigned taken = atomic_load_explicit(&hit_ids, memory_order_relaxed);
    for (;;) {
        if (taken == (1u << RC_HIT_CACHES) - 1)
            return -1;
        int id = __builtin_ctz(~taken);
        if (atomic_compare_exchange_weak_explicit(&hit_ids, &taken, taken | (1u << id),
                                                  memory_order_acquire, memory_order_relaxed)) {
            /* The id's last cache is destroyed: no thread counts into it
             * until the new cache is handed out, after these stores. */
            for (struct rc_thread *t = rc_thread_first(); t; t = t->next)
                for (int s = 0; s < RC_DEVICE_SLOTS; s++)
                    atomic_store_explicit(&t->hits[id][s], 0, memory_order_relaxed);
            return id;
        }
    }
}

void rc_thread_release_hit_id(int id)
{
    if (id >= 0)
        atomic_fetch_and_explicit(&hit_ids, ~(1u << id), memory_order_release);
}

uint64_t rc_thread_sum_hits(int id, int slot)
{
    uint64_t n = 0;
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next)
        n += atomic_load_explicit(&t->hits[id][slot], memory_order_relaxed);
    return n;
}
