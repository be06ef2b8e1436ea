/* The per-device byte budget derived from BAR1 when params.max_bytes is 0. */
#ifndef RC_BAR1_BUDGET_H
#define RC_BAR1_BUDGET_H

#include <stddef.h>

#include "budget_source.h"

/* The budget of CUDA device `device`, from the first of (docs/design.md
 * "The BAR1 budget"):
 * REGCACHE_BAR1_BYTES=size, standing for an empty BAR1 of that size; NVML's
 * free BAR1; the GPU's memory where NVML reports no BAR1 (or is missing);
 * each less the reserve.  0 (= unlimited) when the driver cannot tell the
 * device's memory either.  Read once per device and process. */
size_t rc_bar1_budget(int device);

/* Which of those gave rc_bar1_budget(device); RC_BUDGET_NONE before it was
 * read or when it is unlimited. */
enum rc_budget_source rc_bar1_budget_source(int device);

/* The rule behind it: free less max(10% of total, 32 MiB); 1 (keep nothing
 * unused) when the reserve takes all that is free. */
size_t rc_bar1_budget_rule(unsigned long long total, unsigned long long free);

#endif
