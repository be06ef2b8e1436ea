/* A field of struct regcache_stats by its name, for the helpers that check
 * or print statistics named in their arguments. */
#ifndef STATS_FIELD_H
#define STATS_FIELD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "regcache.h"

/* The field `name` of s in *value; false when there is no such field. */
static inline bool stats_field(const struct regcache_stats *s, const char *name, uint64_t *value)
{
    static const struct {
        const char *name;
        size_t offset;
    } fields[] = {
#define FIELD(f) { #f, offsetof(struct regcache_stats, f) }
        FIELD(hits),
        FIELD(misses),
        FIELD(registrations),
        FIELD(deregistrations),
        FIELD(evictions),
        FIELD(invalidations_tag),
        FIELD(invalidations_notify),
        FIELD(invalidations_explicit),
        FIELD(reg_failures),
        FIELD(entries),
        FIELD(bytes),
        FIELD(peak_bytes),
        FIELD(one_shots),
        FIELD(budget),
        FIELD(fds),
        FIELD(mrs),
        FIELD(prefetches),
        FIELD(prefetch_failures),
        FIELD(prefetch_dropped),
#undef FIELD
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (strcmp(fields[i].name, name) == 0) {
            memcpy(value, (const char *)s + fields[i].offset, sizeof(*value));
            return true;
        }
    return false;
}

#endif
