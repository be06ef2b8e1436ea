#include <stdlib.h>

#include "entry.h"
#include "page_index.h"
#include "regcache.h"

/* Keys are page numbers: a multiplicative mix spreads them over buckets for
 * a fraction of the cost of uthash's default byte-wise hash. */
static inline uint64_t page_hash(uintptr_t page)
{
    uint64_t h = (uint64_t)page * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

#define HASH_FUNCTION(keyptr, keylen, hashv) \
    ((hashv) = (unsigned)page_hash(*(const uintptr_t *)(keyptr)))
#define HASH_KEYCMP(a, b, n) (*(const uintptr_t *)(a) != *(const uintptr_t *)(b))
/* A library must not exit on malloc failure: uthash then leaves the item out
 * (hh.tbl == NULL), and the page merely misses the fast path. */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

/* One node per (page, entry).  The first node of a page is in the hash;
 * others for the same page (allocations packed into one page, or a stale
 * entry next to its replacement) chain behind it. */
struct rc_page_node {
    uintptr_t page;
    struct regcache_entry *entry;
    struct rc_page_node *chain;      /* next node of the same page */
    struct rc_page_node *entry_next; /* next node of the same entry */
    UT_hash_handle hh;
};

static inline struct rc_shard *shard_of(struct rc_page_index *idx, uintptr_t page)
{
    return &idx->shards[(page_hash(page) >> 58) % RC_SHARDS];
}

void rc_page_index_init(struct rc_page_index *idx, unsigned shift)
{
    idx->shift = shift;
    for (int i = 0; i < RC_SHARDS; i++) {
        atomic_init(&idx->shards[i].lock.locked, 0);
        idx->shards[i].table = NULL;
        atomic_init(&idx->shards[i].hits, 0);
    }
}

void rc_page_index_fini(struct rc_page_index *idx)
{
    for (int i = 0; i < RC_SHARDS; i++) {
        struct rc_page_node *head, *tmp;
        HASH_ITER(hh, idx->shards[i].table, head, tmp) {
            HASH_DEL(idx->shards[i].table, head);
            while (head) {
                struct rc_page_node *next = head->chain;
                free(head);
                head = next;
            }
        }
    }
}

struct regcache_entry *rc_page_index_hold(struct rc_page_index *idx, uintptr_t start,
                                          uintptr_t end)
{
    uintptr_t page = start >> idx->shift;
    struct rc_shard *s = shard_of(idx, page);
    struct rc_page_node *n;
    struct regcache_entry *found = NULL;

    rc_spin_lock(&s->lock);
    HASH_FIND(hh, s->table, &page, sizeof(page), n);
    for (; n; n = n->chain) {
        /* The entry cannot be freed while we hold the shard lock: removal
         * unlinks its nodes under this lock before anyone frees it. */
        if (rc_entry_covers(n->entry, start, end) && rc_entry_try_hold(n->entry)) {
            found = n->entry;
            atomic_store_explicit(&s->hits,
                                  atomic_load_explicit(&s->hits, memory_order_relaxed) + 1,
                                  memory_order_relaxed);
            break;
        }
    }
    rc_spin_unlock(&s->lock);
    return found;
}

int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start)
{
    uintptr_t page = start >> idx->shift;
    for (struct rc_page_node *n = e->pages; n; n = n->entry_next)
        if (n->page == page)
            return REGCACHE_OK;

    struct rc_page_node *node = malloc(sizeof(*node));
    if (!node)
        return REGCACHE_ERR_NO_MEMORY;
    node->page = page;
    node->entry = e;
    node->chain = NULL;

    struct rc_shard *s = shard_of(idx, page);
    struct rc_page_node *head;
    rc_spin_lock(&s->lock);
    HASH_FIND(hh, s->table, &page, sizeof(page), head);
    if (head) {
        node->chain = head->chain;
        head->chain = node;
    } else {
        HASH_ADD(hh, s->table, page, sizeof(node->page), node);
        if (!node->hh.tbl) {
            rc_spin_unlock(&s->lock);
            free(node);
            return REGCACHE_ERR_NO_MEMORY;
        }
    }
    rc_spin_unlock(&s->lock);

    node->entry_next = e->pages;
    e->pages = node;
    return REGCACHE_OK;
}

static void unlink_node(struct rc_shard *s, struct rc_page_node *node)
{
    struct rc_page_node *head;
    HASH_FIND(hh, s->table, &node->page, sizeof(node->page), head);
    if (head == node) {
        struct rc_page_node *next = node->chain;
        HASH_DEL(s->table, node);
        /* If the re-add fails the rest of the chain only loses its fast
         * path; the nodes stay on their entries' lists and are freed there. */
        if (next)
            HASH_ADD(hh, s->table, page, sizeof(next->page), next);
        return;
    }
    for (struct rc_page_node *p = head; p; p = p->chain) {
        if (p->chain == node) {
            p->chain = node->chain;
            return;
        }
    }
}

void rc_page_index_remove_entry(struct rc_page_index *idx, struct regcache_entry *e)
{
    struct rc_page_node *n = e->pages;
    while (n) {
        struct rc_page_node *next = n->entry_next;
        struct rc_shard *s = shard_of(idx, n->page);
        rc_spin_lock(&s->lock);
        unlink_node(s, n);
        rc_spin_unlock(&s->lock);
        free(n);
        n = next;
    }
    e->pages = NULL;
}

uint64_t rc_page_index_hits(const struct rc_page_index *idx)
{
    uint64_t sum = 0;
    for (int i = 0; i < RC_SHARDS; i++)
        sum += atomic_load_explicit(&((struct rc_shard *)&idx->shards[i])->hits,
                                    memory_order_relaxed);
    return sum;
}
