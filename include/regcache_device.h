/*
 * regcache_device.h -- the keys of the cache's registrations, for GPU kernels.
 *
 * A cache created with params.device_keys mirrors its registrations into a
 * key table in GPU memory (regcache_device_keys_attach(), regcache.h), so
 * that a kernel building RDMA work requests finds the local key of any
 * buffer the cache holds without asking the host.  This header is what a
 * kernel uses: CUDA C++, header-only, nothing to link.  Compiled by a host
 * C or C++ compiler, the same functions run over host memory laid out the
 * same way (the library's tests use them so); the warp-collective ones then
 * act for one thread.
 *
 * A kernel's life with the table (regcache_device_lookup(3) says the whole
 * contract and what each step costs):
 *
 *   int c = regcache_device_hold_begin(&t, slot);  keys are good from here
 *   if (regcache_device_lookup(&t, p, n, rail, &k) == REGCACHE_DEVICE_HIT &&
 *       (!c || regcache_device_confirm(&t, &k)))
 *       post a WQE of min(n, k.bytes) bytes with k.lkey;
 *   ... poll the completions of what was posted ...
 *   regcache_device_hold_end(&t, slot);            ... to here
 *
 * and, outside a hold section, for what missed: regcache_device_get_key()
 * (at most one post to the host per warp; the host's answer carries the
 * key), then, in the section, regcache_device_key_current() (or, where
 * hold_begin said REGCACHE_DEVICE_CONFIRM, regcache_device_confirm())
 * before the key is used - or a fallback (a bounce buffer the table holds).
 *
 * Never a stale key: a registration's record leaves the host's numbers
 * (record_seqs, pinned host memory) and `unlanded` rises before the host
 * deregisters it, and the host then waits for every hold section that was
 * open to end (at most drain_timeout_ns) before it deregisters.  A section
 * opened later reads `unlanded` after its hold store and a system fence:
 * while removals are on their way to the table's copy in GPU memory it is
 * told to confirm each key against the host's number.  A lookup re-checks
 * the record's sequence number after reading it, so it never returns a key
 * of a record being changed.
 *
 * The host answers a miss from host memory, with no GPU work of its own in
 * between: a kernel's wait never depends on a copy to the GPU, which could
 * queue behind the application's work (say a synchronous copy that waits
 * for this very kernel).
 */
#ifndef REGCACHE_DEVICE_H
#define REGCACHE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The layout's version, in struct regcache_device_table.abi. */
#define REGCACHE_DEVICE_ABI 3

/* Pages the table is keyed by: 64 KiB, the GPU's BAR page. */
#define REGCACHE_DEVICE_PAGE_SHIFT 16

/* Rails a record holds keys of (REGCACHE_MAX_RAILS). */
#define REGCACHE_DEVICE_RAILS 8

/* A page slot's key: the page << REGCACHE_DEVICE_RECORD_BITS | record.  A
 * slot whose key is 0 is empty, and ends a search with seq 0, the only
 * number the host gives an empty slot (a deletion moves the slots after it
 * back); one with another number is skipped (read half written, or marked
 * deleted - seq 1 - by an earlier version of the library). */
#define REGCACHE_DEVICE_RECORD_BITS 24

struct regcache_device_slot {
    uint64_t key;
    uint64_t seq; /* the record's sequence number when this slot was written */
};

/* One registration: 64 bytes, one aligned line. */
struct regcache_device_record {
    /* Even: the record holds the registration below, as of this number;
     * odd: empty or being changed.  It grows with every change. */
    uint64_t seq;
    uint64_t start, end; /* the memory its keys serve: [start, end) */
    uint32_t rails;      /* bit r: lkey[r] is a key */
    uint32_t reserved;
    uint32_t lkey[REGCACHE_DEVICE_RAILS];
};

/* A miss posted to the host (a ring cell in host memory mapped to the
 * device).  seq == ticket: the cell is free for that ticket's poster;
 * ticket + 1: posted. */
struct regcache_device_request {
    uint64_t seq;
    uint64_t addr, len;
    uint32_t rail;
    uint32_t reserved;
};

/* The host's answer to a miss, one per ring cell (host memory mapped to the
 * device): the key of the registration that serves it, one aligned line.
 * The host writes word last, and REGCACHE_DEVICE_ANSWER_BUSY into it before
 * it rewrites the rest for a later ticket of the same cell. */
struct regcache_device_answer {
    uint64_t word;       /* ticket << 16 | -status: whose answer this is */
    uint64_t start, end; /* what the key serves */
    uint64_t seq;        /* the record's sequence number then */
    uint64_t key;        /* lkey << 32 | the record that holds it */
    uint64_t rail;       /* the rail of lkey */
    uint64_t reserved[2];
};

#define REGCACHE_DEVICE_ANSWER_BUSY UINT64_MAX

/*
 * The table as kernels see it: filled by regcache_device_keys_attach() and
 * regcache_device_keys_table() on the host, passed to kernels by value (a
 * kernel argument) or copied to device memory.  Every pointer is valid on
 * the table's device; the host-mapped ones point to pinned host memory.
 */
struct regcache_device_table {
    uint32_t abi;                                    /* REGCACHE_DEVICE_ABI */
    uint32_t slot_bits;                              /* page slots: 1 << slot_bits */
    uint32_t max_probe;                              /* slots a search looks at, at most */
    uint32_t records;                                /* records (1 .. records-1 are used) */
    uint32_t hold_slots;                             /* hold sections open at once, at most */
    uint32_t ring_slots;                             /* ring cells, a power of two */
    const struct regcache_device_slot *slots;        /* device memory */
    const struct regcache_device_record *records_at; /* device memory */
    uint32_t *holds;                        /* host-mapped: per hold slot, odd while open */
    uint32_t *hold_counts;                  /* device memory: sections per hold slot */
    struct regcache_device_request *ring;   /* host-mapped cells */
    unsigned long long *ring_tail;          /* device memory: tickets handed out */
    struct regcache_device_answer *answers; /* host-mapped: one per cell */
    uint64_t *completed;                    /* host-mapped: tickets below it are answered */
    /* Host-mapped: each record's sequence number as the host has it now,
     * ahead of the table's copy (keys from answers are checked here). */
    const uint64_t *record_seqs;
    /* Host-mapped: removals whose write to the table's copy has not landed
     * yet (0: the copy holds every removal; else confirm keys). */
    const uint64_t *unlanded;
};

/* What regcache_device_hold_begin() returns when the section must confirm
 * every key it uses (regcache_device_confirm()). */
#define REGCACHE_DEVICE_CONFIRM 1

/* What the device functions return. */
enum regcache_device_result {
    REGCACHE_DEVICE_HIT = 0,        /* lookup: *key is good (in a hold section) */
    REGCACHE_DEVICE_MISS = 1,       /* lookup: not in the table */
    REGCACHE_DEVICE_POSTED = 2,     /* request: this thread's range is posted */
    REGCACHE_DEVICE_NOT_POSTED = 3, /* request: another thread's range of the warp
                                       was posted: ask again after it */
    REGCACHE_DEVICE_DONE = 4,       /* wait: registered and in the table */
    REGCACHE_DEVICE_PENDING = 5,    /* wait: no answer within the polls allowed */
    REGCACHE_DEVICE_FAILED = 6      /* wait: the host could not register it or
                                       had no room in the table (*status says) */
};

/* A key found by a lookup, or carried by the host's answer to a miss. */
struct regcache_device_key {
    uint32_t lkey;
    uint32_t record;   /* the record it came from */
    uint64_t bytes;    /* from the address looked up to the end of what the
                          key serves: clip a work request there */
    uint64_t seq;      /* the record's sequence number then */
    uint32_t answered; /* 1: from an answer, whose record the table's copy
                          may not hold yet */
    uint32_t reserved;
};

/* ------------------------------------------------------------------------ */
/* How memory is read: L2 on the device (the host writes the table by DMA,  */
/* which no L1 sees), atomics on the host.                                   */
/* ------------------------------------------------------------------------ */

#if defined(__CUDACC__)
#define REGCACHE_DEVICE_FN static __device__ __forceinline__
#else
#define REGCACHE_DEVICE_FN static inline
#endif

#if defined(__CUDA_ARCH__)
/* A slot, whole or torn: either half may be older (the lookup validates
 * the record it names, so a torn slot costs a miss at most). */
REGCACHE_DEVICE_FN void regcache_device_load_slot_(const struct regcache_device_slot *s,
                                                   uint64_t *key, uint64_t *seq)
{
    ulonglong2 v = __ldcg((const ulonglong2 *)s);
    *key = v.x;
    *seq = v.y;
}
REGCACHE_DEVICE_FN uint64_t regcache_device_load_l2_(const uint64_t *p)
{
    return __ldcg((const unsigned long long *)p);
}
REGCACHE_DEVICE_FN uint32_t regcache_device_load_l2_32_(const uint32_t *p)
{
    return __ldcg(p);
}
/* Loads before it are done before loads after it. */
REGCACHE_DEVICE_FN void regcache_device_fence_acquire_(void)
{
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
REGCACHE_DEVICE_FN uint64_t regcache_device_load_seq_(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
/* Host-mapped words: read and written at system scope. */
REGCACHE_DEVICE_FN uint64_t regcache_device_load_sys_(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
REGCACHE_DEVICE_FN void regcache_device_store_sys_(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
REGCACHE_DEVICE_FN void regcache_device_store_sys_32_(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
REGCACHE_DEVICE_FN void regcache_device_fence_sys_(void)
{
    __threadfence_system();
}
REGCACHE_DEVICE_FN unsigned long long regcache_device_next_ticket_(unsigned long long *tail)
{
    return atomicAdd(tail, 1ull);
}
#else
REGCACHE_DEVICE_FN void regcache_device_load_slot_(const struct regcache_device_slot *s,
                                                   uint64_t *key, uint64_t *seq)
{
    /* Acquire: what the record held when the slot was written is seen. */
    *key = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
    *seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
}
REGCACHE_DEVICE_FN uint64_t regcache_device_load_l2_(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
REGCACHE_DEVICE_FN uint32_t regcache_device_load_l2_32_(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
REGCACHE_DEVICE_FN void regcache_device_fence_acquire_(void)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
}
REGCACHE_DEVICE_FN uint64_t regcache_device_load_seq_(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
REGCACHE_DEVICE_FN uint64_t regcache_device_load_sys_(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
REGCACHE_DEVICE_FN void regcache_device_store_sys_(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
REGCACHE_DEVICE_FN void regcache_device_store_sys_32_(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
REGCACHE_DEVICE_FN void regcache_device_fence_sys_(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
REGCACHE_DEVICE_FN unsigned long long regcache_device_next_ticket_(unsigned long long *tail)
{
    return __atomic_fetch_add(tail, 1ull, __ATOMIC_RELAXED);
}
#endif

/* The first slot a page's search looks at: the hash the table is laid out
 * by.  regcache_device_lookup(3). */
REGCACHE_DEVICE_FN uint32_t regcache_device_slot_of(uint64_t page, uint32_t slot_bits)
{
    return (uint32_t)((page * 0x9e3779b97f4a7c15ull) >> (64 - slot_bits));
}

/* ------------------------------------------------------------------------ */
/* Lookup                                                                    */
/* ------------------------------------------------------------------------ */

/* The key of rail `rail` for memory at addr: REGCACHE_DEVICE_HIT with *key
 * (key->bytes: how far it serves; clip the work request there), or
 * REGCACHE_DEVICE_MISS.  Use the key only in a hold section.  Any thread.
 * regcache_device_lookup(3). */
REGCACHE_DEVICE_FN int regcache_device_lookup(const struct regcache_device_table *t,
                                              const void *addr, size_t len, unsigned rail,
                                              struct regcache_device_key *key)
{
    uint64_t a = (uint64_t)(uintptr_t)addr;
    uint64_t page = a >> REGCACHE_DEVICE_PAGE_SHIFT;
    uint32_t mask = (1u << t->slot_bits) - 1;
    uint32_t at = regcache_device_slot_of(page, t->slot_bits);
    struct regcache_device_key best = { 0, 0, 0, 0, 0, 0 };
    if (rail >= REGCACHE_DEVICE_RAILS)
        return REGCACHE_DEVICE_MISS;
    for (uint32_t probe = 0; probe < t->max_probe; probe++, at = (at + 1) & mask) {
        uint64_t k, seq;
        regcache_device_load_slot_(&t->slots[at], &k, &seq);
        if (k == 0) {
            if (seq == 0)
                break; /* never used: the page has no more slots */
            continue;  /* half written, or marked deleted */
        }
        if (k >> REGCACHE_DEVICE_RECORD_BITS != page)
            continue;
        uint32_t r = (uint32_t)(k & ((1u << REGCACHE_DEVICE_RECORD_BITS) - 1));
        if (r == 0 || r >= t->records || (seq & 1))
            continue;
        const struct regcache_device_record *rec = &t->records_at[r];
        uint64_t start = regcache_device_load_l2_(&rec->start);
        uint64_t end = regcache_device_load_l2_(&rec->end);
        uint32_t rails = regcache_device_load_l2_32_(&rec->rails);
        uint32_t lkey = regcache_device_load_l2_32_(&rec->lkey[rail]);
        /* The record was what the slot says while it was read: written
         * before the slot (the host writes records, then slots), and not
         * changed since (the number is the same after the reads). */
        regcache_device_fence_acquire_();
        if (regcache_device_load_seq_(&rec->seq) != seq)
            continue;
        if (a < start || a >= end || !(rails >> rail & 1))
            continue;
        if (end - a > best.bytes) {
            best.lkey = lkey;
            best.record = r;
            best.bytes = end - a;
            best.seq = seq;
        }
        if (end - a >= len)
            break;
    }
    if (!best.bytes)
        return REGCACHE_DEVICE_MISS;
    *key = best;
    return REGCACHE_DEVICE_HIT;
}

/* Does the record a key came from still hold it (1) or not (0)?  One load;
 * in a hold section that needs no confirm, 1 makes a key found before it
 * usable there.  regcache_device_lookup(3). */
REGCACHE_DEVICE_FN int regcache_device_key_current(const struct regcache_device_table *t,
                                                   const struct regcache_device_key *key)
{
    if (key->answered)
        return regcache_device_load_sys_(&t->record_seqs[key->record]) == key->seq;
    return regcache_device_load_seq_(&t->records_at[key->record].seq) == key->seq;
}

/* ------------------------------------------------------------------------ */
/* Hold sections: how a kernel says it is done with its keys                */
/* ------------------------------------------------------------------------ */

/* Does the host still hold the key (1) or not (0)?  One load of host
 * memory, the record's number there.  In a section that hold_begin told
 * to confirm, 1 makes a key usable there, however it was found.
 * regcache_device_lookup(3). */
REGCACHE_DEVICE_FN int regcache_device_confirm(const struct regcache_device_table *t,
                                               const struct regcache_device_key *key)
{
    return regcache_device_load_sys_(&t->record_seqs[key->record]) == key->seq;
}

/* A section that ignores whether it must confirm would use stale keys. */
#if defined(__GNUC__) || defined(__clang__)
#define REGCACHE_DEVICE_MUST_USE_ __attribute__((warn_unused_result))
#else
#define REGCACHE_DEVICE_MUST_USE_
#endif

/* Open a hold section on `slot` (one lane of the warp that owns it): keys
 * looked up from now on stay registered until regcache_device_hold_end().
 * Returns REGCACHE_DEVICE_CONFIRM when removals are on their way to the
 * table (confirm each key before use: regcache_device_confirm()), else 0.
 * A system fence and a read of host memory, about a PCIe round trip.
 * regcache_device_lookup(3). */
REGCACHE_DEVICE_FN REGCACHE_DEVICE_MUST_USE_ int
regcache_device_hold_begin(const struct regcache_device_table *t, unsigned slot)
{
    uint32_t n = t->hold_counts[slot] + 1;
    t->hold_counts[slot] = n;
    regcache_device_store_sys_32_(&t->holds[slot], 2 * n + 1);
    /* The host raises unlanded, fences, then reads the slot: either it sees
     * this section open and waits for it, or this section sees the removal
     * on its way and confirms keys against the host's numbers, which
     * changed before unlanded rose.  Zero: every removal the host may
     * deregister without waiting for this section is in the table's copy. */
    regcache_device_fence_sys_();
    return regcache_device_load_sys_(t->unlanded) ? REGCACHE_DEVICE_CONFIRM : 0;
}
#undef REGCACHE_DEVICE_MUST_USE_

/* End the section once every work request posted with its keys has
 * completed.  One store.  regcache_device_lookup(3). */
REGCACHE_DEVICE_FN void regcache_device_hold_end(const struct regcache_device_table *t,
                                                 unsigned slot)
{
    regcache_device_store_sys_32_(&t->holds[slot], 2 * t->hold_counts[slot] + 2);
}

/* ------------------------------------------------------------------------ */
/* Misses: asking the host                                                   */
/* ------------------------------------------------------------------------ */

/* Ask the host to register [addr, addr+len) on `rail` and answer with its
 * key; warp-collective (lanes without a miss pass need 0), one post per
 * warp, *ticket for each lane with need.  Outside hold sections.
 * regcache_device_lookup(3). */
REGCACHE_DEVICE_FN int regcache_device_request(const struct regcache_device_table *t,
                                               const void *addr, size_t len, unsigned rail,
                                               int need, uint64_t *ticket)
{
    uint64_t a = (uint64_t)(uintptr_t)addr, n = len;
#if defined(__CUDA_ARCH__)
    unsigned active = __activemask();
    unsigned needing = __ballot_sync(active, need);
    if (!needing || !need)
        return REGCACHE_DEVICE_NOT_POSTED;
    int leader = __ffs(needing) - 1;
    uint64_t la = __shfl_sync(needing, a, leader);
    uint64_t ln = __shfl_sync(needing, n, leader);
    unsigned lr = __shfl_sync(needing, rail, leader);
    int lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
#else
    int leader = 0, lane = 0;
    uint64_t la = a, ln = n;
    unsigned lr = rail;
    if (!need)
        return REGCACHE_DEVICE_NOT_POSTED;
#endif
    uint64_t tk = 0;
    if (lane == leader) {
        tk = regcache_device_next_ticket_(t->ring_tail);
        struct regcache_device_request *cell = &t->ring[tk & (t->ring_slots - 1)];
        while (regcache_device_load_sys_(&cell->seq) != tk)
            ; /* every cell taken: the host reads them in ticket order */
        cell->addr = la;
        cell->len = ln;
        cell->rail = lr;
        regcache_device_fence_sys_();
        regcache_device_store_sys_(&cell->seq, tk + 1);
    }
#if defined(__CUDA_ARCH__)
    tk = __shfl_sync(needing, tk, leader);
#endif
    *ticket = tk;
    return la == a && ln == n && lr == rail ? REGCACHE_DEVICE_POSTED : REGCACHE_DEVICE_NOT_POSTED;
}

/* Wait for a ticket's answer, reading host memory at most max_polls times:
 * REGCACHE_DEVICE_DONE, _FAILED (*status says why) or _PENDING.  Outside
 * hold sections.  regcache_device_lookup(3). */
REGCACHE_DEVICE_FN int regcache_device_wait(const struct regcache_device_table *t, uint64_t ticket,
                                            uint64_t max_polls, int *status)
{
    for (uint64_t i = 0; i < max_polls; i++) {
        if (regcache_device_load_sys_(t->completed) > ticket) {
            uint64_t w = regcache_device_load_sys_(&t->answers[ticket & (t->ring_slots - 1)].word);
            /* Answered so long ago that a later ticket took the cell: the
             * next lookup tells. */
            int code = w >> 16 == ticket ? -(int)(w & 0xffff) : 0;
            if (status)
                *status = code;
            return code == 0 ? REGCACHE_DEVICE_DONE : REGCACHE_DEVICE_FAILED;
        }
    }
    return REGCACHE_DEVICE_PENDING;
}

/* The key an answer (DONE) carries for memory at addr on `rail`:
 * REGCACHE_DEVICE_HIT with *key, or REGCACHE_DEVICE_MISS.  Check it with
 * regcache_device_key_current() in a hold section before use.
 * regcache_device_lookup(3). */
REGCACHE_DEVICE_FN int regcache_device_answer(const struct regcache_device_table *t,
                                              uint64_t ticket, const void *addr, size_t len,
                                              unsigned rail, struct regcache_device_key *key)
{
    const struct regcache_device_answer *ans = &t->answers[ticket & (t->ring_slots - 1)];
    uint64_t a = (uint64_t)(uintptr_t)addr;
    (void)len;
    uint64_t word = regcache_device_load_sys_(&ans->word);
    if (word != ticket << 16)
        return REGCACHE_DEVICE_MISS; /* failed, or not this ticket's any more */
    uint64_t start = regcache_device_load_sys_(&ans->start);
    uint64_t end = regcache_device_load_sys_(&ans->end);
    uint64_t seq = regcache_device_load_sys_(&ans->seq);
    uint64_t k = regcache_device_load_sys_(&ans->key);
    uint64_t r = regcache_device_load_sys_(&ans->rail);
    /* The fields are this ticket's only if the word still is (the host
     * marks it busy before it rewrites them). */
    if (regcache_device_load_sys_(&ans->word) != word)
        return REGCACHE_DEVICE_MISS;
    if (r != rail || a < start || a >= end)
        return REGCACHE_DEVICE_MISS;
    key->record = (uint32_t)k;
    key->lkey = (uint32_t)(k >> 32);
    key->bytes = end - a;
    key->seq = seq;
    key->answered = 1;
    key->reserved = 0;
    return REGCACHE_DEVICE_HIT;
}

/* Lookup, and on a miss the request, the wait and the answer:
 * REGCACHE_DEVICE_HIT with *key, or REGCACHE_DEVICE_MISS (take the
 * fallback).  Warp-collective; outside hold sections.
 * regcache_device_lookup(3). */
REGCACHE_DEVICE_FN int regcache_device_get_key(const struct regcache_device_table *t,
                                               const void *addr, size_t len, unsigned rail,
                                               uint64_t max_polls, struct regcache_device_key *key)
{
    int rc = regcache_device_lookup(t, addr, len, rail, key);
    for (int round = 0; round < 32; round++) {
        int need = rc != REGCACHE_DEVICE_HIT;
#if defined(__CUDA_ARCH__)
        if (!__any_sync(__activemask(), need))
            break;
#else
        if (!need)
            break;
#endif
        uint64_t ticket = 0;
        int posted = regcache_device_request(t, addr, len, rail, need, &ticket);
        if (!need)
            continue;
        int got;
#if defined(__CUDA_ARCH__)
        /* The lanes here share the ticket; the lowest polls for them. */
        unsigned sharing = __activemask();
        int poller = __ffs(sharing) - 1, lane;
        asm("mov.u32 %0, %%laneid;" : "=r"(lane));
        got = lane == poller ? regcache_device_wait(t, ticket, max_polls, NULL) : 0;
        got = __shfl_sync(sharing, got, poller);
#else
        got = regcache_device_wait(t, ticket, max_polls, NULL);
#endif
        if (got == REGCACHE_DEVICE_PENDING)
            return REGCACHE_DEVICE_MISS;
        if (got == REGCACHE_DEVICE_FAILED) {
            /* Its own range could not be had; another lane's range failing
             * says nothing of this one: ask for it next round. */
            if (posted == REGCACHE_DEVICE_POSTED)
                return REGCACHE_DEVICE_MISS;
            continue;
        }
        rc = regcache_device_answer(t, ticket, addr, len, rail, key);
        if (rc != REGCACHE_DEVICE_HIT)
            rc = regcache_device_lookup(t, addr, len, rail, key);
    }
    return rc;
}

#ifdef __cplusplus
}
#endif

#endif /* REGCACHE_DEVICE_H */
