/* Where entries live: slabs owned by one cache, so that an entry's memory
 * stays an entry until the cache is destroyed (see entry.h). */
#ifndef RC_ENTRY_POOL_H
#define RC_ENTRY_POOL_H

#include <stdbool.h>
#include <stddef.h>

struct regcache_entry;

struct rc_entry_pool {
    struct regcache_entry *free; /* linked through link_next */
    void **slabs;
    size_t nslabs, slab_cap;
    size_t next_slab_entries; /* slabs double, so small caches stay small */
    /* Bytes from one entry to the next: the entry, then its private data
     * (params.priv_size, rounded to 64). */
    size_t stride, priv_size;
};

void rc_entry_pool_init(struct rc_entry_pool *p, size_t priv_size);
/* Under the cache lock.  A zeroed entry whose refs read detached until the
 * caller sets them; NULL when no slab can be allocated. */
struct regcache_entry *rc_entry_pool_get(struct rc_entry_pool *p);
/* Under the cache lock: e is unused, detached and deregistered. */
void rc_entry_pool_put(struct rc_entry_pool *p, struct regcache_entry *e);
/* Does e lie in one of the pool's slabs?  Reads none of them. */
bool rc_entry_pool_owns(const struct rc_entry_pool *p, const void *e);
/* At cache destroy, when no thread can reach any entry. */
void rc_entry_pool_fini(struct rc_entry_pool *p);

#endif
