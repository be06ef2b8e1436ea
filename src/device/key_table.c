/* The host's copy of a device key table (see key_table.h). */
#include "key_table.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TOMB ((const void *)1)
#define PAGE_SHIFT REGCACHE_DEVICE_PAGE_SHIFT
#define RECORD_MASK ((1u << REGCACHE_DEVICE_RECORD_BITS) - 1)

static size_t slot_bytes(const struct rc_key_table *t)
{
    return t->nslots * sizeof *t->slots;
}

/* The slots, every page of them in memory from the start.  Memory that
 * calloc() leaves untouched costs each slot's first insert two faults -
 * the search reads the kernel's zero page, the store replaces it - and
 * the second shoots that page down on every CPU the process runs on: a
 * burst of entries spreads its slots over most pages of a large table,
 * each fault under the lock that publishing and the ring's answers take. */
static struct regcache_device_slot *resident_slots(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t chunk_words(const struct rc_key_table *t)
{
    return (t->nchunks + 63) / 64;
}

int rc_kt_init(struct rc_key_table *t, unsigned slot_bits, unsigned max_probe, uint32_t nrecords)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->slot_bits = slot_bits;
    t->max_probe = max_probe;
    t->nrecords = nrecords;
    t->nslots = (size_t)1 << slot_bits;
    t->nchunks = t->nslots / RC_KT_CHUNK;
    t->member_cap = 64;
    t->slots = resident_slots(slot_bytes(t));
    t->records = calloc(nrecords, sizeof *t->records);
    t->owner = calloc(nrecords, sizeof *t->owner);
    t->free_records = malloc(nrecords * sizeof *t->free_records);
    t->leaving = malloc(nrecords * sizeof *t->leaving);
    t->unsent = malloc(nrecords * sizeof *t->unsent);
    t->unsent_mark = calloc(nrecords, sizeof *t->unsent_mark);
    t->members = calloc(t->member_cap, sizeof *t->members);
    t->chunk_bits = calloc(chunk_words(t), sizeof *t->chunk_bits);
    t->line_bits = calloc(t->nchunks, sizeof *t->line_bits);
    if (!t->slots || !t->records || !t->owner || !t->free_records || !t->leaving || !t->unsent ||
        !t->unsent_mark || !t->members || !t->chunk_bits || !t->line_bits) {
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
    if (t->slots)
        munmap(t->slots, slot_bytes(t));
    free(t->records);
    free(t->owner);
    free(t->free_records);
    free(t->leaving);
    free(t->unsent);
    free(t->unsent_mark);
    free(t->members);
    free(t->chunk_bits);
    free(t->line_bits);
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

/* Rehash without the tombs, at twice the size only where the live
 * members need it: entries that come and go leave tombs, and doubling for
 * them would grow the map with every entry the table ever knew. */
static bool members_grow(struct rc_key_table *t)
{
    size_t cap = (t->nmembers + 1) * 4 > t->member_cap ? t->member_cap * 2 : t->member_cap;
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

/* Release: after the numbers shown, which a kernel told to confirm reads
 * next. */
static void show_unlanded(struct rc_key_table *t)
{
    if (t->unlanded)
        __atomic_store_n(t->unlanded, t->removals - t->landed, __ATOMIC_RELEASE);
}

void rc_kt_show(struct rc_key_table *t, uint64_t *shown, uint64_t *unlanded)
{
    t->shown = shown;
    t->unlanded = unlanded;
    for (uint32_t r = 0; r < t->nrecords; r++)
        set_seq(t, r, t->records[r].seq);
    show_unlanded(t);
}

void rc_kt_landed_locked(struct rc_key_table *t, uint64_t removals)
{
    if (removals <= t->landed)
        return;
    t->landed = removals;
    show_unlanded(t);
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
    size_t c = i / RC_KT_CHUNK;
    t->slots[i].key = key;
    t->slots[i].seq = seq;
    t->chunk_bits[c / 64] |= UINT64_C(1) << (c % 64);
    t->line_bits[c] |= (uint16_t)(1u << (i % RC_KT_CHUNK / RC_KT_LINE));
}

static void all_slots_dirty(struct rc_key_table *t)
{
    for (size_t c = 0; c < t->nchunks; c++) {
        t->chunk_bits[c / 64] |= UINT64_C(1) << (c % 64);
        t->line_bits[c] = UINT16_MAX;
    }
}

size_t rc_kt_next_chunk(const struct rc_key_table *t, size_t from)
{
    for (size_t w = from / 64; from < t->nchunks; w++, from = w * 64) {
        uint64_t bits = t->chunk_bits[w] & (UINT64_MAX << (from % 64));
        if (bits)
            return w * 64 + (size_t)__builtin_ctzll(bits);
    }
    return t->nchunks;
}

void rc_kt_take_chunk(struct rc_key_table *t, size_t c, struct regcache_device_slot *to)
{
    for (unsigned lines = t->line_bits[c]; lines; lines &= lines - 1) {
        size_t at = c * RC_KT_CHUNK + (size_t)__builtin_ctz(lines) * RC_KT_LINE;
        memcpy(&to[at], &t->slots[at], RC_KT_LINE * sizeof *to);
    }
    t->line_bits[c] = 0;
    t->chunk_bits[c / 64] &= ~(UINT64_C(1) << (c % 64));
}

static uint64_t first_page(uint64_t start)
{
    return start >> PAGE_SHIFT;
}

static uint64_t last_page(uint64_t end)
{
    return (end - 1) >> PAGE_SHIFT;
}

/* Call fn on the slot of each of r's pages (a page has one slot per
 * record at most).  Each page's search starts afresh from its home, so fn
 * may move other slots: deleting one moves those after it. */
static void each_slot_of(struct rc_key_table *t, uint32_t r,
                         void (*fn)(struct rc_key_table *t, size_t i, uint32_t r))
{
    const struct regcache_device_record *rec = &t->records[r];
    size_t mask = t->nslots - 1;
    for (uint64_t p = first_page(rec->start); p <= last_page(rec->end); p++) {
        size_t i = regcache_device_slot_of(p, t->slot_bits);
        for (uint32_t probe = 0; probe < t->max_probe; probe++, i = (i + 1) & mask) {
            const struct regcache_device_slot *s = &t->slots[i];
            if (s->key == (p << REGCACHE_DEVICE_RECORD_BITS | r)) {
                fn(t, i, r);
                break;
            }
            if (s->key == 0)
                break;
        }
    }
}

/* How far the entry in slot i lies from where its page's search starts. */
static size_t distance(const struct rc_key_table *t, size_t i)
{
    uint64_t page = t->slots[i].key >> REGCACHE_DEVICE_RECORD_BITS;
    return (i - regcache_device_slot_of(page, t->slot_bits)) & (t->nslots - 1);
}

/* The slot empties, and leaves no mark: a later entry of its cluster
 * whose search passes the gap moves into it, the gap moving on to where
 * that entry was, until an empty slot or the slot max_probe past the gap
 * (no entry from there on has a search that passes the gap).  A move only
 * brings an entry nearer to where its search starts, so every entry stays
 * within max_probe of it, and every search still reaches its page's slot
 * before an empty one.
 *
 * Kernels read the slots while a write copies such moves, whose words may
 * land in any order: between them the device shows, slot by slot and word
 * by word, what this copy and the last held.  A lookup may then miss - an
 * entry already gone from where it was and not yet where it goes, a search
 * ended early at a gap, a slot torn between two entries - and posts to the
 * ring, as for any miss.  It never finds a wrong record: a moved slot
 * carries what it carried before, its (page, record) key and the number
 * the record had when the slot was written, and a lookup accepts a record
 * only for the page it looks for, at the number its slot carries, re-read
 * after the record (regcache_device.h), wherever the slot lies.  A torn
 * slot pairs one entry's key with another's number: a number no record has
 * (0: the slot was empty; records start at 1) or not the record's (a
 * miss), or the record's own - then one of the slot's words is this
 * copy's, which lands after the records' steps (key_flush.c), so the
 * record is read whole as of that number, and the range check takes it
 * only if it holds the address looked up: a right key, whichever slot led
 * to it. */
static void delete_slot(struct rc_key_table *t, size_t i, uint32_t r)
{
    (void)r;
    size_t mask = t->nslots - 1;
    for (size_t j = (i + 1) & mask, gap = 1; gap < t->max_probe; j = (j + 1) & mask, gap++) {
        const struct regcache_device_slot *s = &t->slots[j];
        if (s->key == 0)
            break;
        if (distance(t, j) < gap)
            continue; /* its search starts after the gap */
        slot_set(t, i, s->key, s->seq);
        i = j;
        gap = 0;
    }
    slot_set(t, i, 0, 0);
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
        if (t->slots[i].key != 0)
            continue;
        slot_set(t, i, p << REGCACHE_DEVICE_RECORD_BITS | r, t->records[r].seq);
        return true;
    }
    return false;
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
    if (!t->unsent_mark[r]) {
        t->unsent_mark[r] = 1;
        t->unsent[t->nunsent++] = r;
    }
    t->live--;
    t->removed++;
    m->record = 0;
    m->removal = ++t->removals;
    show_unlanded(t);
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

/* A few leaving records lose their slots and return to the free list
 * (all of them would hold the lock as long as a burst of invalidations
 * took). */
static void apply_leaving(struct rc_key_table *t)
{
    for (uint32_t k = 0; k < RC_KT_LEAVE_STEP && t->nleaving; k++) {
        uint32_t r = t->leaving[--t->nleaving];
        each_slot_of(t, r, delete_slot);
        t->owner[r] = NULL;
        t->free_records[t->nfree++] = r;
    }
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

uint32_t rc_kt_take_unsent_locked(struct rc_key_table *t, uint32_t *out)
{
    uint32_t n = t->nunsent;
    for (uint32_t i = 0; i < n; i++) {
        if (out)
            out[i] = t->unsent[i];
        t->unsent_mark[t->unsent[i]] = 0;
    }
    t->nunsent = 0;
    return n;
}

bool rc_kt_apply_step_locked(struct rc_key_table *t, size_t *next)
{
    if (t->nleaving) {
        apply_leaving(t);
        return true;
    }
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
    memset(t->slots, 0, slot_bytes(t));
    all_slots_dirty(t);
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
