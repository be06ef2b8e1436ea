/* Where a GPU's byte budget came from.  The codes are stored in the shared
 * ledger (ledger_segment.h), so regcache-stat names them too: keep their
 * values. */
#ifndef RC_BUDGET_SOURCE_H
#define RC_BUDGET_SOURCE_H

#include <stdint.h>

enum rc_budget_source {
    RC_BUDGET_NONE = 0,          /* unlimited: nothing told the GPU's size */
    RC_BUDGET_CONFIGURED = 1,    /* REGCACHE_BAR1_BYTES */
    RC_BUDGET_NVML_BAR1 = 2,     /* NVML's BAR1 reading */
    RC_BUDGET_DEVICE_MEMORY = 3, /* no BAR1 reading: the GPU's memory */
    RC_BUDGET_MAX_BYTES = 4,     /* the cache's own max_bytes (never shared) */
};

static inline const char *rc_budget_source_name(uint64_t source)
{
    static const char *const names[] = { "none", "configured", "nvml-bar1", "device-memory",
                                         "max_bytes" };
    return source < sizeof names / sizeof names[0] ? names[source] : "unknown";
}

#endif
