/* The host's copy of a device key table (see key_table.h). */
#include "key_table.h"

#include <stdlib.h>
#include <string.h>

#define TOMB ((const void *)1)
#define PAGE_SHIFT REGCACHE_DEVICE_PAGE_SHIFT
#define RECORD_MASK ((1u << REGCACHE_DEVICE_RECORD_BITS) - 1)

int rc_kt_init(struct rc_key_table *t, unsigned slot_bits, unsigned max_probe, uint32_t nrecords)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->slot_bits = slot_bits;
    t->max_probe = max_probe;
    t->nrecords = nrecords;
    t->nslots = (size_t)1 << slot_bits;
    t->member_cap = 64;
    t->slots = calloc(t->nslots, sizeof *t->slots);
    t->records = calloc(nrecords, sizeof *t->records);
    t->owner = calloc(nrecords, sizeof *t->owner);
    t->free_records = malloc(nrecords * sizeof *t->free_records);
    t->leaving = malloc(nrecords * sizeof *t->leaving);
    t->members = calloc(t->member_cap, sizeof *t->members);
    t->chunk_dirty = calloc(t->nslots / RC_KT_CHUNK + 1, 1);
    t->line_dirty = calloc(t->nslots / RC_KT_LINE + 1, 1);
    if (!t->slots || !t->records || !t->owner || !t->free_records || !t->leaving || !t->members ||
        !t->chunk_dirty || !t->line_dirty) {
        rc_kt_fini(t);
        return -1;
    }
    /* Handed out lowest first, so that the records written stay in one
     * short span. */
    for (uint32_t r = nrecords - 1; r >= 1; r--)
        t->free_records[t->nfree++] = r;
    /* Empty, as the device's copy is written first (key_flush.c). */
    for (uint32_t r = 0; r < nrecords; r++)
        t->records[r].seq = 1;
    t->dirty_lo = 1;
    t->dirty_hi = 0;
    return 0;
}

void rc_kt_fini(struct rc_key_table *t)
{
    free(t->slots);
    free(t->records);
    free(t->owner);
    free(t->free_records);
    free(t->leaving);
    free(t->members);
    free(t->chunk_dirty);
    free(t->line_dirty);
    free(t->queue);
    pthread_mutex_destroy(&t->lock);
    memset(t, 0, sizeof *t);
}

/* ---- members: the entries the table knows, by id ------------------------ */

static size_t hash_id(const void *id, size_t cap)
{
    return (size_t)(((uint64_t)(uintptr_t)id >> 6) * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
}

static struct rc_kt_member *member_find(const struct rc_key_table *t, const void *id)
{
    for (size_t i = hash_id(id, t->member_cap);; i = (i + 1) & (t->member_cap - 1)) {
        struct rc_kt_member *m = &t->members[i];
        if (m->id == id)
            return m;
        if (!m->id)
            return NULL;
    }
}

static bool members_grow(struct rc_key_table *t)
{
    size_t cap = t->member_cap * 2;
    struct rc_kt_member *old = t->members, *fresh = calloc(cap, sizeof *fresh);
    if (!fresh)
        return false;
    for (size_t i = 0; i < t->member_cap; i++) {
        if (!old[i].id || old[i].id == TOMB)
            continue;
        size_t j = hash_id(old[i].id, cap);
        while (fresh[j].id)
            j = (j + 1) & (cap - 1);
        fresh[j] = old[i];
    }
    t->members = fresh;
    t->member_cap = cap;
    t->member_tombs = 0;
    free(old);
    return true;
}

static struct rc_kt_member *member_add(struct rc_key_table *t, const void *id)
{
    if ((t->nmembers + t->member_tombs + 1) * 2 > t->member_cap && !members_grow(t))
        return NULL;
    size_t i = hash_id(id, t->member_cap);
    while (t->members[i].id && t->members[i].id != TOMB)
        i = (i + 1) & (t->member_cap - 1);
    if (t->members[i].id == TOMB)
        t->member_tombs--;
    t->nmembers++;
    t->members[i] = (struct rc_kt_member){ .id = id };
    return &t->members[i];
}

static void member_drop(struct rc_key_table *t, struct rc_kt_member *m)
{
    *m = (struct rc_kt_member){ .id = TOMB };
    t->nmembers--;
    t->member_tombs++;
}

/* ---- records and slots ---------------------------------------------------- */

/* Every change of a record's number goes through here: kernels checking
 * an answered key read the number it shows (release: after the record's
 * new contents, which the answer also carries). */
static void set_seq(struct rc_key_table *t, uint32_t r, uint64_t seq)
{
    t->records[r].seq = seq;
    if (t->shown)
        __atomic_store_n(&t->shown[r], seq, __ATOMIC_RELEASE);
}

void rc_kt_show(struct rc_key_table *t, uint64_t *shown)
{
    t->shown = shown;
    for (uint32_t r = 0; r < t->nrecords; r++)
        set_seq(t, r, t->records[r].seq);
}

static void record_dirty(struct rc_key_table *t, uint32_t r)
{
    if (t->dirty_lo > t->dirty_hi) {
        t->dirty_lo = t->dirty_hi = r;
        return;
    }
    if (r < t->dirty_lo)
        t->dirty_lo = r;
    if (r > t->dirty_hi)
        t->dirty_hi = r;
}

static void slot_set(struct rc_key_table *t, size_t i, uint64_t key, uint64_t seq)
{
    t->slots[i].key = key;
    t->slots[i].seq = seq;
    t->chunk_dirty[i / RC_KT_CHUNK] = 1;
    t->line_dirty[i / RC_KT_LINE] = 1;
}

static void all_slots_dirty(struct rc_key_table *t)
{
    memset(t->chunk_dirty, 1, t->nslots / RC_KT_CHUNK + 1);
    memset(t->line_dirty, 1, t->nslots / RC_KT_LINE + 1);
}

static uint64_t first_page(uint64_t start)
{
    return start >> PAGE_SHIFT;
}

static uint64_t last_page(uint64_t end)
{
    return (end - 1) >> PAGE_SHIFT;
}

/* Call fn on each slot of r's pages that names r. */
static void each_slot_of(struct rc_key_table *t, uint32_t r,
                         void (*fn)(struct rc_key_table *t, size_t i, uint32_t r))
{
    const struct regcache_device_record *rec = &t->records[r];
    size_t mask = t->nslots - 1;
    for (uint64_t p = first_page(rec->start); p <= last_page(rec->end); p++) {
        size_t i = regcache_device_slot_of(p, t->slot_bits);
        for (uint32_t probe = 0; probe < t->max_probe; probe++, i = (i + 1) & mask) {
            const struct regcache_device_slot *s = &t->slots[i];
            if (s->key == 0 && s->seq == 0)
                break;
            if (s->key == (p << REGCACHE_DEVICE_RECORD_BITS | r))
                fn(t, i, r);
        }
    }
}

static void delete_slot(struct rc_key_table *t, size_t i, uint32_t r)
{
    (void)r;
    slot_set(t, i, 0, 1);
    t->used_slots--;
    t->deleted_slots++;
}

static void renumber_slot(struct rc_key_table *t, size_t i, uint32_t r)
{
    slot_set(t, i, t->slots[i].key, t->records[r].seq);
}

/* A slot for page p naming r, in the first free place of p's search. */
static bool insert_slot(struct rc_key_table *t, uint64_t p, uint32_t r)
{
    size_t mask = t->nslots - 1;
    size_t i = regcache_device_slot_of(p, t->slot_bits);
    for (uint32_t probe = 0; probe < t->max_probe; probe++, i = (i + 1) & mask) {
        struct regcache_device_slot *s = &t->slots[i];
        if (s->key != 0)
            continue;
        if (s->seq == 1)
            t->deleted_slots--;
        t->used_slots++;
        slot_set(t, i, p << REGCACHE_DEVICE_RECORD_BITS | r, t->records[r].seq);
        return true;
    }
    return false;
}

/* Deleted slots lengthen every search through them: once they are a
 * quarter of the table, it is laid out again (all of it rewritten on the
 * device; a lookup meanwhile may miss, never find a wrong record). */
static void maybe_rehash(struct rc_key_table *t)
{
    if (t->deleted_slots * 4 < t->nslots)
        return;
    memset(t->slots, 0, t->nslots * sizeof *t->slots);
    all_slots_dirty(t);
    t->used_slots = t->deleted_slots = 0;
    for (uint32_t r = 1; r < t->nrecords; r++) {
        const struct regcache_device_record *rec = &t->records[r];
        if (!t->owner[r] || (rec->seq & 1))
            continue;
        for (uint64_t p = first_page(rec->start); p <= last_page(rec->end); p++)
            if (!insert_slot(t, p, r))
                t->unmirrored++;
    }
}

/* ---- publishing and leaving ---------------------------------------------- */

void rc_kt_publish_locked(struct rc_key_table *t, const void *id, uint64_t start, uint64_t end,
                          uint32_t rails, const uint32_t *lkey)
{
    struct rc_kt_member *m = member_find(t, id);
    if (m && m->removal)
        return; /* left already: nothing of it is published again */
    if (!m && !(m = member_add(t, id))) {
        t->unmirrored++;
        return;
    }
    if (!m->queued) {
        if (t->nqueue == t->queue_cap) {
            size_t cap = t->queue_cap ? 2 * t->queue_cap : 64;
            struct rc_kt_insert *q = realloc(t->queue, cap * sizeof *q);
            if (!q) {
                if (!m->record)
                    member_drop(t, m);
                t->unmirrored++;
                return;
            }
            t->queue = q;
            t->queue_cap = cap;
        }
        m->queued = (uint32_t)++t->nqueue;
    }
    struct rc_kt_insert *in = &t->queue[m->queued - 1];
    *in = (struct rc_kt_insert){ .id = id, .start = start, .end = end, .rails = rails };
    memcpy(in->lkey, lkey, sizeof in->lkey);
}

uint64_t rc_kt_leave_locked(struct rc_key_table *t, const void *id)
{
    struct rc_kt_member *m = member_find(t, id);
    if (!m || m->removal)
        return 0;
    if (m->queued)
        t->queue[m->queued - 1].cancelled = true;
    m->queued = 0;
    if (!m->record) {
        member_drop(t, m); /* never written to the device */
        return 0;
    }
    uint32_t r = m->record;
    set_seq(t, r, t->records[r].seq + 1); /* odd: empty from the next write on */
    record_dirty(t, r);
    t->leaving[t->nleaving++] = r;
    t->live--;
    t->removed++;
    m->record = 0;
    m->removal = ++t->removals;
    return m->removal;
}

uint64_t rc_kt_forget_locked(struct rc_key_table *t, const void *id)
{
    struct rc_kt_member *m = member_find(t, id);
    if (!m)
        return 0;
    if (m->record)
        rc_kt_leave_locked(t, id); /* deregistered without leaving first */
    uint64_t removal = m->removal;
    if (m->queued)
        t->queue[m->queued - 1].cancelled = true;
    member_drop(t, m);
    return removal;
}

/* The leaving records lose their slots and return to the free list. */
static void apply_leaving(struct rc_key_table *t)
{
    for (uint32_t k = 0; k < t->nleaving; k++) {
        uint32_t r = t->leaving[k];
        each_slot_of(t, r, delete_slot);
        t->owner[r] = NULL;
        t->free_records[t->nfree++] = r;
    }
    t->nleaving = 0;
    maybe_rehash(t);
}

static void apply_insert(struct rc_key_table *t, const struct rc_kt_insert *in)
{
    struct rc_kt_member *m = member_find(t, in->id);
    if (!m)
        return; /* forgotten meanwhile */
    m->queued = 0;
    uint32_t r = m->record;
    struct regcache_device_record *rec;
    if (r) {
        /* One more rail: the record changes, and its slots with it. */
        rec = &t->records[r];
        rec->rails = in->rails;
        memcpy(rec->lkey, in->lkey, sizeof rec->lkey);
        set_seq(t, r, rec->seq + 2);
        record_dirty(t, r);
        each_slot_of(t, r, renumber_slot);
        t->published++;
        return;
    }
    if (!t->nfree) {
        t->unmirrored++;
        return;
    }
    r = t->free_records[--t->nfree];
    rec = &t->records[r];
    rec->start = in->start;
    rec->end = in->end;
    rec->rails = in->rails;
    memcpy(rec->lkey, in->lkey, sizeof rec->lkey);
    set_seq(t, r, rec->seq + 1); /* even: holds the entry */
    t->owner[r] = in->id;
    m->record = r;
    record_dirty(t, r);
    t->live++;
    t->published++;
    for (uint64_t p = first_page(in->start); p <= last_page(in->end); p++)
        if (!insert_slot(t, p, r))
            t->unmirrored++;
}

bool rc_kt_apply_step_locked(struct rc_key_table *t, size_t *next)
{
    if (t->nleaving)
        apply_leaving(t);
    while (*next < t->nqueue) {
        const struct rc_kt_insert *in = &t->queue[(*next)++];
        if (!in->cancelled) {
            apply_insert(t, in);
            return true;
        }
    }
    return false;
}

void rc_kt_queue_done_locked(struct rc_key_table *t)
{
    t->nqueue = 0;
}

void rc_kt_clear_locked(struct rc_key_table *t)
{
    for (uint32_t r = 1; r < t->nrecords; r++) {
        if (t->records[r].seq & 1)
            continue;
        set_seq(t, r, t->records[r].seq + 1);
        record_dirty(t, r);
    }
    memset(t->slots, 0, t->nslots * sizeof *t->slots);
    all_slots_dirty(t);
    t->used_slots = t->deleted_slots = 0;
    t->live = 0;
}

bool rc_kt_find_locked(const struct rc_key_table *t, uint64_t addr, uint64_t len, unsigned rail,
                       struct regcache_device_key *key, uint64_t *start, uint64_t *end)
{
    struct regcache_device_table view = {
        .slot_bits = t->slot_bits,
        .max_probe = t->max_probe,
        .records = t->nrecords,
        .slots = t->slots,
        .records_at = t->records,
    };
    if (regcache_device_lookup(&view, (const void *)(uintptr_t)addr, len, rail, key) !=
            REGCACHE_DEVICE_HIT ||
        key->bytes < len)
        return false;
    *start = t->records[key->record].start;
    *end = t->records[key->record].end;
    return true;
}
