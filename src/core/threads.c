/* Per-thread records (see threads.h). */
#include "threads.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "entry.h"

__thread struct rc_thread *rc_thread_current __attribute__((tls_model("initial-exec")));

static _Atomic(struct rc_thread *) all_records;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static atomic_uint hit_ids; /* bit i: hit id i is taken */

/* Records per mmap(): a chunk is about 170 KiB. */
#define CHUNK 16

static void release_record(void *arg)
{
    struct rc_thread *t = arg;
    /* A regcache call from a later TLS destructor attaches afresh rather
     * than writing into a record another thread may own by then. */
    rc_thread_current = NULL;
    t->hint = 0;
    atomic_store_explicit(&t->in_use, false, memory_order_release);
}

/* Only the forking thread lives on in the child: every other record is
 * free again, and no hold from before the fork means anything here (the
 * inherited caches refuse all work; see registry.c). */
static void forget_parent_threads(void)
{
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next) {
        for (int i = 0; i < RC_HOLD_SLOTS; i++)
            atomic_store_explicit(&t->holds[i], 0, memory_order_relaxed);
        if (t == rc_thread_current)
            continue;
        atomic_store_explicit(&t->walk, 0, memory_order_relaxed);
        t->walk_depth = 0;
        atomic_store_explicit(&t->in_use, false, memory_order_relaxed);
    }
}

static void make_exit_key(void)
{
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
            atomic_compare_exchange_strong_explicit(&t->in_use, &used, true,
                                                    memory_order_acquire, memory_order_relaxed))
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
    pthread_setspecific(exit_key, t);
    rc_thread_current = t;
    return t;
}

bool rc_thread_holds(const struct regcache_entry *e)
{
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next)
        for (int i = 0; i < RC_HOLD_SLOTS; i++)
            /* Acquire: a holder's reads of the entry happen before its
             * release of the slot, and so before whatever the caller does
             * to an entry it finds unheld. */
            if ((atomic_load_explicit(&t->holds[i], memory_order_acquire) & ~RC_HOLD_RAIL_MASK) ==
                (uintptr_t)e)
                return true;
    return false;
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
