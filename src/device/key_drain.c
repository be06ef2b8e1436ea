/* Before a registration a table mirrored is deregistered, kernels that may
 * hold its key must be done with it.  A kernel says so by hold sections
 * (regcache_device.h): while one is open, its slot in host memory reads an
 * odd number, new for every section.  When the entry left, its record's
 * number changed in host memory (record_seqs) and then `unlanded` rose;
 * this fence comes after both, and the slots are read after it.  A section
 * stores its slot, fences, then reads `unlanded`: one whose store this
 * drain does not see reads the raise (or the fall that follows the
 * removal's landing on the device), so it confirms every key against the
 * host's numbers (or its lookups miss the record): it cannot use the key.
 * Nothing here waits for the GPU.  The drain waits for each section open
 * then to end - its slot to read anything else - for at most
 * drain_timeout_ns.  The slots are read all at once first: a section
 * opened while the drain waits for another needs no wait, and waiting for
 * each slot in turn, as it reads then, would wait for nearly every warp of
 * a busy kernel once.  A section that outlasts that is given up on: the
 * registration goes, counted, and later drains do not wait for that same
 * section again (a kernel that hangs must not stall every
 * deregistration). */
#include "device_table.h"

#include <sched.h>
#include <time.h>

#include "cpu_relax.h"

/* Slot s reads v still: pause, a little longer each time. */
static void pause_for(unsigned round)
{
    if (round < 64) {
        rc_cpu_relax();
    } else if (round < 128) {
        sched_yield();
    } else {
        struct timespec ts = { 0, 20000 };
        nanosleep(&ts, NULL);
    }
}

/* Bit 0 of either slot in a 64-bit word of two, whatever the byte order:
 * set when either section is open. */
#define EITHER_OPEN 0x0000000100000001ull

/* A line's eight words or'ed, written out: a loop of atomic loads is left
 * rolled, and would cost as much again. */
_Static_assert(RC_HOLD_LINE == 16, "a line of hold slots is eight words");
static uint64_t line_bits(const uint64_t *w)
{
#define W(i) __atomic_load_n(&w[i], __ATOMIC_RELAXED)
    return W(0) | W(1) | W(2) | W(3) | W(4) | W(5) | W(6) | W(7);
#undef W
}

/* The slots whose sections are open now (and not given up on): their
 * numbers in open[], how many returned.  The scan runs before every
 * deregistration of a mirrored entry, over every slot, and most lines hold
 * no open section: a line is read as eight 64-bit words, or'ed (the block
 * is padded to whole lines with zeros, which read closed), and only a line
 * with an open section is read again slot by slot (a slot opened since is
 * waited for too, which costs at most that wait). */
static size_t open_sections(struct rc_dtable *t, struct open *open)
{
    const uint64_t *words = (const uint64_t *)(const void *)t->holds;
    size_t n = 0;
    for (size_t at = 0; at < t->p.hold_slots; at += RC_HOLD_LINE) {
        if (!(line_bits(&words[at / 2]) & EITHER_OPEN))
            continue;
        for (size_t s = at; s < at + RC_HOLD_LINE; s++) {
            uint32_t v = __atomic_load_n(&t->holds[s], __ATOMIC_RELAXED);
            if ((v & 1) && __atomic_load_n(&t->given_up[s], __ATOMIC_RELAXED) != v + 1)
                open[n++] = (struct open){ (uint32_t)s, v };
        }
    }
    /* A slot read closed: what its section did is done before what
     * follows (the deregistration). */
    atomic_thread_fence(memory_order_acquire);
    return n;
}

void rc_dtable_drain(struct rc_dtable *t, uint64_t removal, uint64_t numbered)
{
    if (atomic_load_explicit(&t->drained, memory_order_acquire) >= removal)
        return;
    /* The removals up to `numbered` show in unlanded; the slots are read
     * after it. */
    atomic_thread_fence(memory_order_seq_cst);
    pthread_mutex_lock(&t->drain_lock);
    size_t n = open_sections(t, t->open);
    uint64_t begun = n ? rc_dtable_clock() : 0, deadline = begun + t->p.drain_timeout_ns;
    bool timed_out = false;
    for (size_t i = 0; i < n; i++) {
        size_t s = t->open[i].slot;
        uint32_t v = t->open[i].seq;
        for (unsigned round = 0; __atomic_load_n(&t->holds[s], __ATOMIC_ACQUIRE) == v; round++) {
            if (timed_out || rc_dtable_clock() >= deadline) {
                timed_out = true;
                __atomic_store_n(&t->given_up[s], v + 1, __ATOMIC_RELAXED);
                break;
            }
            pause_for(round);
        }
    }
    pthread_mutex_unlock(&t->drain_lock);
    if (begun) {
        uint64_t ns = rc_dtable_clock() - begun;
        atomic_fetch_add_explicit(&t->drains, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->drain_ns_total, ns, memory_order_relaxed);
        rc_dtable_raise(&t->drain_ns_max, ns);
        if (timed_out)
            atomic_fetch_add_explicit(&t->drain_timeouts, 1, memory_order_relaxed);
    }
    uint64_t old = atomic_load_explicit(&t->drained, memory_order_relaxed);
    while (numbered > old &&
           !atomic_compare_exchange_weak_explicit(&t->drained, &old, numbered, memory_order_release,
                                                  memory_order_relaxed))
        ;
}
